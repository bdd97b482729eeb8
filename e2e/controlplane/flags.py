"""Command lines of the components: what each is told, and why where it is not obvious."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path

import yaml

from e2e.controlplane import settings
from e2e.controlplane.certs import Pki
from e2e.controlplane.errors import ControlPlaneError


def etcd_args(state_dir: Path, client_port: int, peer_port: int) -> list[str]:
    peer = f"http://127.0.0.1:{peer_port}"
    client = f"http://127.0.0.1:{client_port}"
    return [
        "--name=tessera-e2e",
        f"--data-dir={state_dir / 'etcd'}",
        f"--listen-client-urls={client}",
        f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}",
        f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=tessera-e2e={peer}",
        "--initial-cluster-state=new",
        # Test data: durability is not worth the fsync latency.
        "--unsafe-no-fsync=true",
        "--log-level=warn",
    ]


def apiserver_args(
    state_dir: Path, pki: Pki, port: int, etcd: str, *, gates: Mapping[str, bool] = settings.FEATURE_GATES
) -> list[str]:
    return [
        f"--etcd-servers={etcd}",
        "--bind-address=127.0.0.1",
        "--advertise-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={state_dir / 'run' / 'apiserver'}",
        f"--tls-cert-file={pki.apiserver.cert}",
        f"--tls-private-key-file={pki.apiserver.key}",
        f"--client-ca-file={pki.ca.cert}",
        f"--service-account-issuer={settings.SERVICE_ACCOUNT_ISSUER}",
        f"--service-account-key-file={pki.service_account_pub}",
        f"--service-account-signing-key-file={pki.service_account_key}",
        f"--service-cluster-ip-range={settings.SERVICE_CLUSTER_IP_RANGE}",
        "--authorization-mode=Node,RBAC",
        f"--enable-admission-plugins={','.join(settings.ENABLED_ADMISSION_PLUGINS)}",
        *settings.feature_gates_args(gates),
        f"--runtime-config={settings.RUNTIME_CONFIG}",
        # Endpoints may not hold loopback addresses; nothing in the tests needs the kubernetes Endpoints.
        "--endpoint-reconciler-type=none",
        # No kube-proxy routes a Service's cluster IP: webhooks (and aggregated APIs) are called at an
        # address from the Service's EndpointSlices instead.
        "--enable-aggregator-routing=true",
        "--allow-privileged=true",
        "--profiling=false",
    ]


def controller_manager_args(
    state_dir: Path,
    pki: Pki,
    port: int,
    *,
    gates: Mapping[str, bool] = settings.FEATURE_GATES,
    controllers: tuple[str, ...] = settings.KCM_CONTROLLERS,
    rate: settings.ClientRate = settings.UPSTREAM_DEFAULTS.controller_manager,
) -> list[str]:
    return [
        f"--kubeconfig={state_dir / 'controller-manager.kubeconfig'}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={state_dir / 'run' / 'kcm'}",
        f"--controllers={','.join(controllers)}",
        "--leader-elect=false",
        # Each controller acts as its own service account, with the RBAC roles a real cluster gives it.
        "--use-service-account-credentials=true",
        f"--service-account-private-key-file={pki.service_account_key}",
        f"--root-ca-file={pki.ca.cert}",
        *settings.feature_gates_args(gates),
        f"--kube-api-qps={rate.qps:g}",
        f"--kube-api-burst={rate.burst}",
    ]


def scheduler_config_path(state_dir: Path) -> Path:
    return state_dir / "scheduler-config.yaml"


SCHEDULER_API = "kubescheduler.config.k8s.io/v1"


MAX_SCHEDULER_CONFIG_BYTES = 1 << 20


def load_scheduler_configuration(path: Path) -> dict[str, object]:
    """A KubeSchedulerConfiguration from a YAML file, as `scheduler_config` takes it for `base`."""
    try:
        with path.open("rb") as f:
            raw = f.read(MAX_SCHEDULER_CONFIG_BYTES + 1)
    except OSError as e:
        raise ControlPlaneError(f"cannot read the scheduler configuration {path}: {e.strerror}") from e
    if len(raw) > MAX_SCHEDULER_CONFIG_BYTES:
        raise ControlPlaneError(
            f"the scheduler configuration {path} is over {MAX_SCHEDULER_CONFIG_BYTES} bytes"
        )
    try:
        loaded = yaml.safe_load(raw)
    except yaml.YAMLError as e:
        raise ControlPlaneError(f"the scheduler configuration {path} is not YAML: {e}") from e
    if not isinstance(loaded, dict):
        raise ControlPlaneError(
            f"the scheduler configuration {path} must be a mapping (a KubeSchedulerConfiguration)"
        )
    scheduler_config(path.parent, base=loaded)  # its apiVersion and kind, checked now
    return loaded


def scheduler_config(
    state_dir: Path,
    *,
    rate: settings.ClientRate = settings.UPSTREAM_DEFAULTS.scheduler,
    base: Mapping[str, object] | None = None,
) -> dict[str, object]:
    """The KubeSchedulerConfiguration file: the client's rate lives there (the `--kube-api-qps` flags are
    deprecated and ignored once a config file is given), and leader election is off.

    `base` is a KubeSchedulerConfiguration of the caller's (profiles, `percentageOfNodesToScore`, extenders):
    its fields are kept, but the plane's own client connection and leader election replace its."""
    if base is not None and (base.get("apiVersion"), base.get("kind")) != (
        SCHEDULER_API,
        "KubeSchedulerConfiguration",
    ):
        raise ControlPlaneError(
            f"a scheduler configuration needs apiVersion {SCHEDULER_API} and kind "
            f"KubeSchedulerConfiguration, not {base.get('apiVersion')!r} / {base.get('kind')!r}"
        )
    return {
        **(base or {}),
        "apiVersion": SCHEDULER_API,
        "kind": "KubeSchedulerConfiguration",
        "clientConnection": {
            "kubeconfig": str(state_dir / "scheduler.kubeconfig"),
            "qps": rate.qps,
            "burst": rate.burst,
        },
        "leaderElection": {"leaderElect": False},
    }


def scheduler_args(
    state_dir: Path, port: int, *, gates: Mapping[str, bool] = settings.FEATURE_GATES
) -> list[str]:
    return [
        f"--config={scheduler_config_path(state_dir)}",
        "--bind-address=127.0.0.1",
        f"--secure-port={port}",
        f"--cert-dir={state_dir / 'run' / 'scheduler'}",
        # the plane listens on 127.0.0.1 only; the scale bench reads CPU profiles from here
        "--authorization-always-allow-paths=/healthz,/readyz,/livez,/debug/pprof/*",
        *settings.feature_gates_args(gates),
        "--v=2",
    ]
