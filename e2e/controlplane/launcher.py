"""Starting the control plane (etcd, then kube-apiserver, then kube-controller-manager and kube-scheduler)
and stopping it."""

from __future__ import annotations

import atexit
import shutil
import ssl
import time
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path

import structlog
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config
from kubernetes.client.exceptions import ApiException

from e2e.controlplane import settings
from e2e.controlplane.binaries import Binaries
from e2e.controlplane.certs import Pki, issue_certificate, make_pki
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.files import write_atomic
from e2e.controlplane.flags import (
    apiserver_args,
    controller_manager_args,
    etcd_args,
    scheduler_args,
    scheduler_config,
    scheduler_config_path,
)
from e2e.controlplane.kubeconfig import write_kubeconfig
from e2e.controlplane.processes import Component, spawn, stop_component, stop_record
from e2e.controlplane.readiness import insecure_context, wait_for_http_ok, wait_until
from e2e.controlplane.releases import Release
from e2e.controlplane.state import ControlPlaneState, load_state, save_state, state_path
from tests.support.loopback import free_ports

log = structlog.get_logger(__name__)

# Blocks until a (re)started component serves.
ReadyCheck = Callable[[Component], None]

# What a start creates inside the state directory; a new start removes exactly these.
_GENERATED = (
    "etcd",
    "pki",
    "logs",
    "run",
    "admin.kubeconfig",
    "controller-manager.kubeconfig",
    "scheduler.kubeconfig",
    "scheduler-config.yaml",
)


class ControlPlane:
    """A running control plane. `stop()` is idempotent; tests get one from `start_control_plane`."""

    def __init__(
        self,
        *,
        state_dir: Path,
        binaries: Binaries,
        pki: Pki,
        server: str,
        etcd: str,
        feature_gates: Mapping[str, bool] = settings.FEATURE_GATES,
        client_rates: settings.ClientRates = settings.UPSTREAM_DEFAULTS,
        die_with_parent: bool = True,
        release: Release = settings.RELEASE,
        scheduler_configuration: Mapping[str, object] | None = None,
    ) -> None:
        self.state_dir = state_dir
        self.scheduler_configuration = scheduler_configuration
        self.binaries = binaries
        self.pki = pki
        self.server = server
        self.etcd = etcd
        self.feature_gates = dict(feature_gates)
        self.release = release
        self.client_rates = client_rates
        self.die_with_parent = die_with_parent
        self.kubeconfig = state_dir / "admin.kubeconfig"
        self.components: list[Component] = []
        self._ready: dict[str, ReadyCheck] = {}
        self._stopped = False

    def _save(self) -> None:
        save_state(
            self.state_dir,
            ControlPlaneState(
                server=self.server,
                kubeconfig=str(self.kubeconfig),
                etcd=self.etcd,
                components=tuple(c.record() for c in self.components),
            ),
        )

    def add(self, component: Component, *, ready: ReadyCheck | None = None) -> Component:
        """Records a started component; `ready` is how `stopped`/`restart` wait for it to serve again."""
        self.components.append(component)
        if ready is not None:
            self._ready[component.name] = ready
        self._save()  # at once, so `down` finds a half-started plane too
        return component

    @contextmanager
    def stopped(
        self, name: str, *, grace_s: float = 10.0, args: list[str] | None = None, binary: Path | None = None
    ) -> Iterator[None]:
        """Component `name` is down for the body of the with-block, then runs again with the same command
        line (or `args`; same port, same data; from `binary` if given) and is ready: for tests of clients that
        must survive a restart.
        It gets `grace_s` after SIGTERM before SIGKILL; 0 plays a crash (a kube-apiserver with clients
        connected takes longer than 10 s to end on SIGTERM)."""
        if self._stopped:
            raise ControlPlaneError(f"cannot stop {name!r}: the control plane in {self.state_dir} is stopped")
        index = next((i for i, c in enumerate(self.components) if c.name == name), None)
        if index is None:
            running = ", ".join(c.name for c in self.components)
            raise ControlPlaneError(f"no component {name!r} in this control plane; it runs: {running}")
        old = self.components[index]
        stop_component(old, grace_s=grace_s)
        log.info("controlplane.component_down", component=name)
        try:
            yield
        finally:
            new = spawn(
                name=old.name,
                binary=old.binary if binary is None else binary,
                args=list(old.args) if args is None else args,
                log_path=old.log,
                die_with_parent=self.die_with_parent,
            )
            self.components[index] = new
            self._save()
            ready = self._ready.get(name)
            if ready is not None:
                ready(new)
            log.info("controlplane.component_up", component=name, pid=new.process.pid)

    def remove(self, name: str, *, grace_s: float = 10.0) -> None:
        """Stops component `name` for good and forgets it; the others keep running (for components added
        beside the plane for a while, such as Volcano's)."""
        index = next((i for i, c in enumerate(self.components) if c.name == name), None)
        if index is None:
            return
        stop_component(self.components.pop(index), grace_s=grace_s)
        self._ready.pop(name, None)
        self._save()
        log.info("controlplane.component_removed", component=name)

    def restart(self, name: str, *, grace_s: float = 10.0) -> Component:
        """Stops component `name` and starts it again the same way; returns it once it is ready."""
        with self.stopped(name, grace_s=grace_s):
            pass
        return next(c for c in self.components if c.name == name)

    def switch_gates(self, override: Mapping[str, bool]) -> None:
        """Restarts kube-apiserver, kube-controller-manager and kube-scheduler with the release's default
        gates and `override`, one after the other, as an administrator turning a gate on does; etcd keeps
        its data."""
        gates = settings.feature_gates(override, of=self.release, profile="default")
        for component in ("kube-apiserver", "kube-controller-manager", "kube-scheduler"):
            old = next(c for c in self.components if c.name == component)
            args = [a for a in old.args if not a.startswith(("--feature-gates=", "--controllers="))]
            args += settings.feature_gates_args(gates)
            if component == "kube-controller-manager":
                args.append(f"--controllers={','.join(settings.kcm_controllers(gates, of=self.release))}")
            with self.stopped(component, args=args):
                pass
        self.feature_gates = gates
        log.info("controlplane.gates_switched", gates=settings.feature_gates_args(gates))

    def api_client(self) -> k8s.ApiClient:
        """A client with the admin (system:masters) identity."""
        api: k8s.ApiClient = k8s_config.new_client_from_config(  # type: ignore[no-untyped-call]
            config_file=str(self.kubeconfig)
        )
        return api

    def client_kubeconfig(self, *, name: str, user: str, groups: tuple[str, ...] = ()) -> Path:
        """Writes a kubeconfig for another identity (e.g. `system:node:<node>` in `system:nodes`)."""
        pair = issue_certificate(ca=self.pki.ca, name=f"user-{name}", common_name=user, organizations=groups)
        return write_kubeconfig(
            self.state_dir / f"{name}.kubeconfig",
            server=self.server,
            ca_cert=self.pki.ca.cert,
            client=pair,
            user=user,
        )

    def stop(self) -> None:
        if self._stopped:
            return
        self._stopped = True
        # Reverse order: clients first, etcd last, so nothing logs storage errors on the way down.
        for component in reversed(self.components):
            stop_component(component)
        state_path(self.state_dir).unlink(missing_ok=True)
        log.info("controlplane.stopped", state_dir=str(self.state_dir))

    def __enter__(self) -> ControlPlane:
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop()


def stop_control_plane(state_dir: Path) -> int:
    """Stops whatever the state file in `state_dir` names, from any process. Returns how many were running."""
    state = load_state(state_dir)
    if state is None:
        return 0
    stopped = sum(stop_record(record) for record in reversed(state.components))
    state_path(state_dir).unlink(missing_ok=True)
    log.info("controlplane.down", state_dir=str(state_dir), stopped=stopped)
    return stopped


def _apiserver_context(pki: Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(pki.ca.cert))
    context.load_cert_chain(str(pki.admin.cert), str(pki.admin.key))
    return context


def _default_service_account_exists(api: k8s.ApiClient) -> bool:
    try:
        k8s.CoreV1Api(api).read_namespaced_service_account("default", "default")
    except ApiException as e:
        if e.status == 404:
            return False
        raise ControlPlaneError(f"reading the default service account failed: {e.status} {e.reason}") from e
    return True


def _start(plane: ControlPlane, ports: list[int], *, die_with_parent: bool, timeout_s: float) -> None:
    state_dir, pki, binaries = plane.state_dir, plane.pki, plane.binaries
    logs = state_dir / "logs"
    etcd_client, etcd_peer, apiserver_port, kcm_port, scheduler_port = ports

    gates = plane.feature_gates

    def http_ok(url: str, context: ssl.SSLContext | None, expect_body: str = "ok") -> ReadyCheck:
        return lambda c: wait_for_http_ok(
            c, url, context=context, timeout_s=timeout_s, expect_body=expect_body
        )

    etcd_ready = http_ok(f"{plane.etcd}/health", None, '"health":"true"')
    etcd = plane.add(
        spawn(
            name="etcd",
            binary=binaries.etcd,
            args=etcd_args(state_dir, etcd_client, etcd_peer),
            log_path=logs / "etcd.log",
            die_with_parent=die_with_parent,
        ),
        ready=etcd_ready,
    )
    etcd_ready(etcd)

    apiserver_ready = http_ok(f"{plane.server}/readyz", _apiserver_context(pki))
    apiserver = plane.add(
        spawn(
            name="kube-apiserver",
            binary=binaries.kube_apiserver,
            args=apiserver_args(state_dir, pki, apiserver_port, plane.etcd, gates=gates),
            log_path=logs / "kube-apiserver.log",
            die_with_parent=die_with_parent,
        ),
        ready=apiserver_ready,
    )
    apiserver_ready(apiserver)

    write_kubeconfig(
        plane.kubeconfig, server=plane.server, ca_cert=pki.ca.cert, client=pki.admin, user="tessera-admin"
    )
    write_kubeconfig(
        state_dir / "controller-manager.kubeconfig",
        server=plane.server,
        ca_cert=pki.ca.cert,
        client=pki.controller_manager,
        user="system:kube-controller-manager",
    )
    write_kubeconfig(
        state_dir / "scheduler.kubeconfig",
        server=plane.server,
        ca_cert=pki.ca.cert,
        client=pki.scheduler,
        user="system:kube-scheduler",
    )
    rates = plane.client_rates
    config = scheduler_config(state_dir, rate=rates.scheduler, base=plane.scheduler_configuration)
    write_atomic(scheduler_config_path(state_dir), yaml.safe_dump(config, sort_keys=False).encode("utf-8"))

    kcm_ready = http_ok(f"https://127.0.0.1:{kcm_port}/healthz", insecure_context())
    scheduler_ready = http_ok(f"https://127.0.0.1:{scheduler_port}/readyz", insecure_context())
    # Both start before either is waited for: their start-ups overlap.
    kcm = plane.add(
        spawn(
            name="kube-controller-manager",
            binary=binaries.kube_controller_manager,
            args=controller_manager_args(
                state_dir,
                pki,
                kcm_port,
                gates=gates,
                controllers=settings.kcm_controllers(gates, of=plane.release),
                rate=rates.controller_manager,
            ),
            log_path=logs / "kube-controller-manager.log",
            die_with_parent=die_with_parent,
        ),
        ready=kcm_ready,
    )
    scheduler = plane.add(
        spawn(
            name="kube-scheduler",
            binary=binaries.kube_scheduler,
            args=scheduler_args(state_dir, scheduler_port, gates=gates),
            log_path=logs / "kube-scheduler.log",
            die_with_parent=die_with_parent,
        ),
        ready=scheduler_ready,
    )
    kcm_ready(kcm)
    scheduler_ready(scheduler)
    # Pods are admitted only once the serviceaccount controller made the namespace's default account: proof
    # that KCM's controllers run with working credentials.
    with plane.api_client() as api:
        wait_until(
            kcm,
            lambda: _default_service_account_exists(api),
            what="default service account",
            timeout_s=timeout_s,
        )


def start_control_plane(
    *,
    state_dir: Path,
    binaries: Binaries,
    die_with_parent: bool = True,
    timeout_s: float = 120.0,
    feature_gates: Mapping[str, bool] | None = None,
    client_rates: settings.ClientRates = settings.UPSTREAM_DEFAULTS,
    release: Release = settings.RELEASE,
    gate_profile: str = settings.GATE_PROFILE,
    scheduler_configuration: Mapping[str, object] | None = None,
) -> ControlPlane:
    """Starts a fresh control plane in `state_dir` (stopping and wiping one left there before).

    `release` is the Kubernetes release `binaries` were built for (the session's by default); it runs with
    the gates of `gate_profile` (`default`: the release's own), `feature_gates` merged over them (e.g.
    `{"DRAConsumableCapacity": True}` on a release where it is off); every component gets the same gates.
    `client_rates`:
    the controller manager's and the scheduler's client QPS/burst (upstream defaults unless told).
    `scheduler_configuration`: a KubeSchedulerConfiguration kube-scheduler runs with (its profiles,
    `percentageOfNodesToScore`, extenders; the plane sets the client and leader election); None: the
    release's defaults.

    With `die_with_parent` the components are killed when this process exits, however it exits; the CLI's `up`
    passes False to leave them running. The kernel ties that to the calling thread: call it from a thread
    that lives as long as the control plane should (the main thread in pytest).
    """
    started = time.monotonic()
    # a bad gate fails before anything starts
    gates = settings.feature_gates(feature_gates, of=release, profile=gate_profile)
    state_dir = state_dir.resolve()
    state_dir.mkdir(parents=True, exist_ok=True)
    stop_control_plane(state_dir)
    for name in _GENERATED:
        path = state_dir / name
        if path.is_dir():
            shutil.rmtree(path)
        else:
            path.unlink(missing_ok=True)
    pki = make_pki(state_dir / "pki")
    ports = free_ports(5)
    plane = ControlPlane(
        state_dir=state_dir,
        binaries=binaries,
        pki=pki,
        server=f"https://127.0.0.1:{ports[2]}",
        etcd=f"http://127.0.0.1:{ports[0]}",
        feature_gates=gates,
        client_rates=client_rates,
        die_with_parent=die_with_parent,
        release=release,
        scheduler_configuration=scheduler_configuration,
    )
    if die_with_parent:
        atexit.register(plane.stop)
    try:
        _start(plane, ports, die_with_parent=die_with_parent, timeout_s=timeout_s)
    except BaseException:
        plane.stop()
        raise
    log.info(
        "controlplane.ready",
        version=release.version,
        gates=settings.feature_gates_args(gates),
        client_rates=client_rates.name,
        server=plane.server,
        kubeconfig=str(plane.kubeconfig),
        seconds=round(time.monotonic() - started, 1),
    )
    return plane
