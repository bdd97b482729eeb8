"""Running Volcano beside a control plane: its CRDs applied, vc-controller-manager and vc-scheduler started as
components of the plane (stopped before it, logs in `<state>/logs`), the default kube-scheduler left running.
Pods with `schedulerName: volcano` are Volcano's, every other pod stays kube-scheduler's."""

from __future__ import annotations

import socket
import time
from functools import cached_property, partial
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.io.api_objects import field_at, path
from dra_driver.io.rest_calls import RestCalls, status_message
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.files import write_atomic
from e2e.controlplane.launcher import ControlPlane, ReadyCheck
from e2e.controlplane.processes import Component, spawn
from e2e.controlplane.readiness import wait_for_http_ok, wait_until
from e2e.harness.kube import wait_for
from e2e.harness.server_apply import ServerApply
from e2e.volcano.binaries import VolcanoBinaries
from e2e.volcano.config import SCHEDULER_NAME, gates_flag, scheduler_conf, scheduler_gates

log = structlog.get_logger(__name__)

SCHEDULER = "vc-scheduler"
CONTROLLER_MANAGER = "vc-controller-manager"
DEFAULT_QUEUE = "default"


def _free_port() -> int:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _queue_exists(api: k8s.ApiClient, name: str) -> bool:
    try:
        k8s.CustomObjectsApi(api).get_cluster_custom_object(
            "scheduling.volcano.sh", "v1beta1", "queues", name
        )
    except ApiException as e:
        if e.status == 404:
            return False
        raise ControlPlaneError(f"reading Volcano queue {name!r} failed: {e.status} {e.reason}") from e
    return True


CRD = "/apis/apiextensions.k8s.io/v1/customresourcedefinitions/{name}"


def _established(rest: RestCalls, name: str) -> bool:
    crd = rest.get(path(CRD, name=name))
    conditions = field_at(crd, "status", "conditions") or []
    return any(c.get("type") == "Established" and c.get("status") == "True" for c in conditions)


class Volcano:
    """Volcano's two components on `plane`; `use_scheduler` swaps the scheduler's binary (same flags)."""

    def __init__(self, *, plane: ControlPlane, binaries: VolcanoBinaries, timeout_s: float = 120.0) -> None:
        self.plane = plane
        self.binaries = binaries
        self.timeout_s = timeout_s
        self.state_dir = plane.state_dir / "volcano"
        self.conf_path = self.state_dir / "scheduler.conf"
        self.kubeconfig = plane.client_kubeconfig(name="volcano", user="volcano", groups=("system:masters",))
        self.scheduler_binary = binaries.scheduler
        self._ready: dict[str, ReadyCheck] = {}

    @property
    def scheduler_log(self) -> Path:
        """vc-scheduler's log (`--v=3`: e.g. the capacity plugin's "Queue <q> DRA resource insufficient for
        candidate <pod>"), appended to by every restart."""
        return self.plane.state_dir / "logs" / f"{SCHEDULER}.log"

    def start(self) -> Volcano:
        started = time.monotonic()
        self.apply_crds()
        write_atomic(self.conf_path, yaml.safe_dump(scheduler_conf(), sort_keys=False).encode("utf-8"))
        controller_manager = self._spawn(CONTROLLER_MANAGER, self.binaries.controller_manager, [])
        scheduler = self._spawn(
            SCHEDULER,
            self.scheduler_binary,
            [
                f"--scheduler-conf={self.conf_path}",
                f"--scheduler-name={SCHEDULER_NAME}",
                gates_flag(scheduler_gates(self.plane.feature_gates, plane_release=self.plane.release)),
                "--cache-dumper=false",
            ],
        )
        self._ready[CONTROLLER_MANAGER](controller_manager)
        self._ready[SCHEDULER](scheduler)
        with self.plane.api_client() as api:
            # The controller manager makes the queues PodGroups fall into; until then nothing is admitted.
            wait_until(
                controller_manager,
                lambda: _queue_exists(api, DEFAULT_QUEUE),
                what=f"queue {DEFAULT_QUEUE}",
                timeout_s=self.timeout_s,
            )
        log.info(
            "volcano.ready",
            scheduler=str(self.scheduler_binary),
            seconds=round(time.monotonic() - started, 1),
        )
        return self

    def apply_crds(self) -> None:
        """Server-side, from this process (e2e.harness.server_apply; the CRDs' schemas are too large for a
        client apply's last-applied annotation), then until the API server serves each (Established)."""
        documents = self._crds
        with self.plane.api_client() as api:
            ServerApply(api).apply(documents)
            rest = RestCalls(api)
            for name in (str(doc["metadata"]["name"]) for doc in documents):
                wait_for(f"CRD {name} established", partial(_established, rest, name), timeout_s=60)

    @cached_property
    def _crds(self) -> list[Any]:
        """The CRD manifests, parsed once for start and stop: 1.1 MB of YAML, 2.8 CPU-s with the pure-Python
        loader, 0.2 s with libyaml's."""
        loader = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
        return [
            doc
            for p in self.binaries.crd_files()
            for doc in yaml.load_all(p.read_text(encoding="utf-8"), Loader=loader)
            if doc
        ]

    def stop(self) -> None:
        """Stops both components and deletes the CRDs (their objects with them), leaving the plane as it was
        before `start`: for a module that runs Volcano beside a plane other modules share. The API server
        finishes the deletion in the background (about 15 s of removing the CRDs' objects not waited for)."""
        for name in (SCHEDULER, CONTROLLER_MANAGER):
            self.plane.remove(name, grace_s=5.0)
        with self.plane.api_client() as api:
            rest = RestCalls(api)
            for name in (str(doc["metadata"]["name"]) for doc in self._crds):
                try:
                    rest.delete(path(CRD, name=name))
                except ApiException as e:
                    if e.status != 404:
                        raise ControlPlaneError(f"deleting CRD {name} failed: {status_message(e)}") from e
        log.info("volcano.stopped")

    def use_conf(self, conf: dict[str, Any]) -> None:
        """Restarts vc-scheduler with the scheduler configuration `conf` (same binary and flags)."""
        with self.plane.stopped(SCHEDULER, grace_s=5.0, binary=self.scheduler_binary):
            write_atomic(self.conf_path, yaml.safe_dump(conf, sort_keys=False).encode("utf-8"))
        log.info("volcano.conf_switched", tiers=[[p["name"] for p in t["plugins"]] for t in conf["tiers"]])

    def use_scheduler(self, binary: Path) -> None:
        """Restarts vc-scheduler from `binary` with the same command line: a new process with a fresh cache,
        as after a rollout of another image."""
        with self.plane.stopped(SCHEDULER, grace_s=5.0, binary=binary):
            self.scheduler_binary = binary
        log.info("volcano.scheduler_switched", binary=str(binary))

    def _spawn(self, name: str, binary: Path, extra: list[str]) -> Component:
        url = f"http://127.0.0.1:{_free_port()}/healthz"
        args = [
            f"--kubeconfig={self.kubeconfig}",
            "--leader-elect=false",
            "--enable-healthz=true",
            f"--healthz-address={url.removeprefix('http://').removesuffix('/healthz')}",
            f"--listen-address=127.0.0.1:{_free_port()}",
            "--v=3",
            *extra,
        ]
        component = spawn(
            name=name,
            binary=binary,
            args=args,
            log_path=self.plane.state_dir / "logs" / f"{name}.log",
            die_with_parent=self.plane.die_with_parent,
        )

        def ready(c: Component) -> None:
            wait_for_http_ok(c, url, context=None, timeout_s=self.timeout_s)

        self._ready[name] = ready
        return self.plane.add(component, ready=ready)
