"""One simulated GPU node: a Node object, the real node plugin daemon (`python -m kubelet_plugin.daemon
--simulate ...`, or on the NVML backend over the fake libnvidia-ml) and a kubelet stand-in, as two processes
sharing a temporary root that plays the host's filesystem (sockets, CDI specs, claim directories, the GPUs'
state). The plugin runs as the chart's ServiceAccount with a token bound to its own Pod object on the node
(e2e.harness.plugin_identity), never as admin."""

from __future__ import annotations

import ctypes
import json
import os
import signal
import subprocess
import sys
import time
from collections.abc import Mapping
from dataclasses import dataclass
from enum import StrEnum
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes import client as k8s

from dra_driver.backends.sim_state import SimState, read_state
from dra_driver.vocabulary.names import DRIVER_NAME
from e2e.controlplane.nodes import create_node, delete_node
from e2e.controlplane.processes import is_alive, log_tail, stop_record
from e2e.controlplane.state import ComponentRecord
from e2e.harness.plugin_identity import PluginCredentials, issue, report_running, revoke
from e2e.kubelet_standin.errors import StandInError
from e2e.kubelet_standin.runtime_record import PodRuntime, find_record
from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL, mps_dir_for, stop_mps_daemons
from tests.support.doubles.fake_nvml import FakeNvmlNode
from tests.support.loopback import free_port

log = structlog.get_logger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
NODES_DIR = REPO_ROOT / "e2e" / "nodes"
LIBRARY_BUILD = REPO_ROOT / "interceptor" / "build" / "libtessera.so"
_PR_SET_PDEATHSIG = 1


class BackendKind(StrEnum):
    """What the node plugin reads the node file's GPUs through."""

    SIMULATED = "simulated"  # --simulate: the simulated backend
    NVML = "nvml"  # the NVML backend (pynvml) over the fake libnvidia-ml (interceptor/build/fake)


def _die_with_parent() -> None:
    ctypes.CDLL(None, use_errno=True).prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


def node_name_of(node_file: Path) -> str:
    data = yaml.safe_load(node_file.read_text(encoding="utf-8"))
    if not isinstance(data, dict) or not isinstance(data.get("nodeName"), str):
        raise StandInError(f"{node_file}: a SimulatedNode needs a string `nodeName`")
    return str(data["nodeName"])


def spawn_python(
    *,
    name: str,
    args: list[str],
    log_path: Path,
    die_with_parent: bool,
    base_env: Mapping[str, str] | None = None,
) -> ComponentRecord:
    """Starts `python <args>` from the repository root in its own session, output to `log_path`, in
    `base_env` (default: this process's environment)."""
    log_path.parent.mkdir(parents=True, exist_ok=True)
    base = os.environ if base_env is None else base_env
    env = {
        **base,
        "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO_ROOT), base.get("PYTHONPATH")])),
    }
    with log_path.open("ab") as out:
        process = subprocess.Popen(
            [sys.executable, *args],
            cwd=REPO_ROOT,
            env=env,
            stdin=subprocess.DEVNULL,
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
            preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509 - only prctl
        )
    return ComponentRecord(name=name, pid=process.pid, binary=sys.executable, log=str(log_path))


@dataclass(frozen=True, slots=True)
class NodeRecord:
    name: str
    root: str
    node_file: str
    plugin: ComponentRecord
    standin: ComponentRecord

    def to_dict(self) -> dict[str, Any]:
        return {
            "name": self.name,
            "root": self.root,
            "nodeFile": self.node_file,
            "plugin": {"pid": self.plugin.pid, "binary": self.plugin.binary, "log": self.plugin.log},
            "standin": {"pid": self.standin.pid, "binary": self.standin.binary, "log": self.standin.log},
        }

    @classmethod
    def from_dict(cls, d: dict[str, Any]) -> NodeRecord:
        return cls(
            name=d["name"],
            root=d["root"],
            node_file=d["nodeFile"],
            plugin=ComponentRecord(name="plugin", **d["plugin"]),
            standin=ComponentRecord(name="standin", **d["standin"]),
        )


class SimNode:
    """A simulated node. `start()` creates the Node and the plugin's identity (its Pod object and token),
    starts the stand-in (which wipes stale slices, as a kubelet does at start) and then the plugin, and waits
    for the plugin's ResourceSlices. `admin_kubeconfig` only names the cluster the plugin's kubeconfig
    points at; the chart's RBAC must be installed (e2e.harness.plugin_identity.install_identity)."""

    def __init__(
        self,
        *,
        api: k8s.ApiClient,
        node_file: Path,
        root: Path,
        admin_kubeconfig: Path,
        node_kubeconfig: Path,
        labels: dict[str, str] | None = None,
        die_with_parent: bool = True,
        backend: BackendKind = BackendKind.SIMULATED,
        settings_file: Path | None = None,
        plugin_args: tuple[str, ...] = (),
    ) -> None:
        self.api = api
        self.node_file = node_file.resolve()
        self.name = node_name_of(node_file)
        self.root = root.resolve()
        self.admin_kubeconfig = admin_kubeconfig
        self.node_kubeconfig = node_kubeconfig
        self.labels = labels or {}
        self.die_with_parent = die_with_parent
        self.backend = backend
        self.settings_file = settings_file  # the daemon's --settings (NodeSettings); a restart rereads it
        self.plugin_args = plugin_args  # more daemon flags (e.g. a shorter --health-interval)
        self.metrics_port = free_port()  # the daemon's /metrics and /healthz, on loopback
        self.plugin: ComponentRecord | None = None
        self.standin: ComponentRecord | None = None
        self.credentials: PluginCredentials | None = None

    # ---- paths ------------------------------------------------------------------------------------------

    @property
    def sim_state_file(self) -> Path:
        return self.root / "sim-state.json"

    @property
    def fake_nvml(self) -> FakeNvmlNode:
        """The fake driver's view of the node (its state file and /proc tree live under the root)."""
        return FakeNvmlNode(node_file=self.node_file, state_dir=self.root / "fake-nvml")

    @property
    def runtime_dir(self) -> Path:
        return self.root / "var/lib/standin/pods"

    @property
    def cdi_dir(self) -> Path:
        return self.root / "var/run/cdi"

    @property
    def claims_dir(self) -> Path:
        return self.root / "var/lib/tessera/claims"

    @property
    def gpus_dir(self) -> Path:
        return self.root / "var/lib/tessera/gpus"

    @property
    def library_path(self) -> Path:
        return self.root / "var/lib/tessera/lib/libtessera.so"

    @property
    def metrics_url(self) -> str:
        return f"http://127.0.0.1:{self.metrics_port}/metrics"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def plugin_kubeconfig(self) -> Path:
        return self.root / "plugin.kubeconfig"

    # ---- lifecycle --------------------------------------------------------------------------------------

    def _install_library(self) -> None:
        # The host copy of the interception library that vgpu containers get mounted; a placeholder when the
        # C library was not built (the stand-in only checks that the mount source exists).
        self.library_path.parent.mkdir(parents=True, exist_ok=True)
        data = LIBRARY_BUILD.read_bytes() if LIBRARY_BUILD.exists() else b""
        self.library_path.write_bytes(data)

    def start(self, *, timeout_s: float = 60.0) -> None:
        self.root.mkdir(parents=True, exist_ok=True)
        self._install_library()
        create_node(self.api, name=self.name, labels=self.labels)
        self.issue_identity()
        self.start_standin()
        self.start_plugin()
        self.wait_for_slices(timeout_s=timeout_s)
        log.info("simnode.ready", node=self.name, root=str(self.root))

    @property
    def standin_ready_file(self) -> Path:
        return self.root / "var/lib/standin/ready"

    def start_standin(self, *, timeout_s: float = 30.0) -> None:
        """Starts the stand-in and waits until it is ready: it wipes the node's slices at start, as a kubelet
        does, and that must happen before the plugin publishes."""
        self.standin_ready_file.unlink(missing_ok=True)
        self.standin = spawn_python(
            name="standin",
            args=[
                "-m",
                "e2e.kubelet_standin",
                f"--node-name={self.name}",
                f"--root={self.root}",
                f"--kubeconfig={self.node_kubeconfig}",
            ],
            log_path=self.logs / "standin.log",
            die_with_parent=self.die_with_parent,
        )
        ready = f"{self.standin.pid}\n"
        deadline = time.monotonic() + timeout_s
        while not (self.standin_ready_file.exists() and self.standin_ready_file.read_text() == ready):
            self._check_alive()
            if time.monotonic() > deadline:
                raise StandInError(
                    f"the kubelet stand-in of node {self.name} did not start within {timeout_s}s"
                )
            time.sleep(0.05)

    def issue_identity(self) -> PluginCredentials:
        """The plugin's Pod object on this node and its bound token (once; the Node must exist)."""
        if self.credentials is None:
            self.credentials = issue(
                self.api,
                node=self.name,
                admin_kubeconfig=self.admin_kubeconfig,
                kubeconfig=self.plugin_kubeconfig,
            )
        return self.credentials

    def start_plugin(self) -> None:
        credentials = self.issue_identity()
        nvml = self.backend is BackendKind.NVML
        gpus = [] if nvml else [f"--simulate={self.node_file}", f"--sim-state={self.sim_state_file}"]
        settings = [f"--settings={self.settings_file}"] if self.settings_file is not None else []
        self.plugin = spawn_python(
            name="plugin",
            args=[
                "-m",
                "kubelet_plugin.daemon",
                f"--node-name={self.name}",
                f"--root={self.root}",
                *gpus,
                *settings,
                f"--kubeconfig={credentials.kubeconfig}",
                f"--library-path={self.library_path}",
                f"--mps-control={FAKE_MPS_CONTROL}",
                f"--mps-dir={mps_dir_for(self.root)}",
                f"--metrics-address=127.0.0.1:{self.metrics_port}",
                "--log-format=json",
                *self.plugin_args,
            ],
            log_path=self.logs / "plugin.log",
            die_with_parent=self.die_with_parent,
            base_env=self.fake_nvml.env() if nvml else None,
        )
        report_running(self.api, credentials)

    def stop_plugin(self) -> None:
        if self.plugin is not None:
            stop_record(self.plugin, grace_s=15.0)
            self.plugin = None

    def restart_plugin(self, *, timeout_s: float = 60.0) -> None:
        self.stop_plugin()
        self.start_plugin()
        self.wait_for_registration(timeout_s=timeout_s)

    def stop(self, *, delete_node_object: bool = True) -> None:
        self.stop_plugin()
        stop_mps_daemons(mps_dir_for(self.root))  # they outlive the plugin, by design
        if self.standin is not None:
            stop_record(self.standin, grace_s=15.0)
            self.standin = None
        if self.credentials is not None:
            revoke(self.api, pod=self.credentials.pod)
            self.credentials = None
        if delete_node_object:
            delete_node(self.api, name=self.name)

    def record(self) -> NodeRecord:
        if self.plugin is None or self.standin is None:
            raise StandInError(f"node {self.name} is not running")
        return NodeRecord(
            name=self.name,
            root=str(self.root),
            node_file=str(self.node_file),
            plugin=self.plugin,
            standin=self.standin,
        )

    # ---- waiting and looking ----------------------------------------------------------------------------

    def _check_alive(self) -> None:
        for record in (self.plugin, self.standin):
            if record is not None and not is_alive(record.pid):
                raise StandInError(f"{record.name} of node {self.name} exited:\n{log_tail(Path(record.log))}")

    def slices(self) -> list[dict[str, Any]]:
        return driver_slices(self.api, self.name)

    def wait_for_slices(self, *, timeout_s: float) -> None:
        """Until the pool is complete: as many slices as `resourceSliceCount` says, all of one generation."""
        deadline = time.monotonic() + timeout_s
        while True:
            self._check_alive()
            if pool_complete(self.slices()):
                return
            if time.monotonic() > deadline:
                raise StandInError(f"node {self.name} published no complete pool within {timeout_s}s")
            time.sleep(0.2)

    def wait_for_registration(self, *, timeout_s: float) -> None:
        """Until the plugin answers on its registration socket again and the pool is complete."""
        socket = self.root / "var/lib/kubelet/plugins_registry" / f"{DRIVER_NAME}-reg.sock"
        deadline = time.monotonic() + timeout_s
        while not socket.exists():
            self._check_alive()
            if time.monotonic() > deadline:
                raise StandInError(f"the plugin of node {self.name} did not recreate {socket}")
            time.sleep(0.1)
        self.wait_for_slices(timeout_s=max(1.0, deadline - time.monotonic()))

    def runtime(self, *, namespace: str, name: str) -> PodRuntime | None:
        return find_record(self.runtime_dir, namespace=namespace, name=name)

    def sim_state(self) -> SimState | None:
        return read_state(self.sim_state_file)

    def mig_instances(self) -> list[tuple[str, str]]:
        """(GPU UUID, MIG UUID) of every live MIG instance, from the backend's or the fake driver's state."""
        if self.backend is BackendKind.NVML:
            return self.fake_nvml.mig_instances()
        return mig_instances_in(self.sim_state_file)

    def cdi_specs(self) -> list[Path]:
        return cdi_specs_in(self.cdi_dir)

    def claim_dirs(self) -> list[Path]:
        return entries_of(self.claims_dir)

    def mps_dirs(self) -> list[Path]:
        """One per GPU whose MPS control daemon runs (or whose leftovers were not cleaned)."""
        return entries_of(mps_dir_for(self.root))


# ---- what a node's plugin left in the API and on the host (shared with e2e.realnode) ---------------------


def driver_slices(api: k8s.ApiClient, node_name: str) -> list[dict[str, Any]]:
    """The node's ResourceSlices of Tessera's driver."""
    response: Any = k8s.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node_name}", _preload_content=False
    )
    data = json.loads(response.data)
    return [s for s in data.get("items") or [] if s["spec"]["driver"] == DRIVER_NAME]


def pool_complete(slices: list[dict[str, Any]]) -> bool:
    """As many slices as `resourceSliceCount` says, all of one generation."""
    if not slices:
        return False
    pools = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices}
    return len(pools) == 1 and next(iter(pools))[1] == len(slices)


def mig_instances_in(sim_state_file: Path) -> list[tuple[str, str]]:
    """(GPU UUID, MIG UUID) of every live MIG instance in a simulated backend's state file."""
    state = read_state(sim_state_file)
    if state is None:
        return []
    return [(str(gpu), i.uuid) for gpu, g in state.gpus.items() for i in g.instances]


def cdi_specs_in(cdi_dir: Path) -> list[Path]:
    return sorted(cdi_dir.glob("*.json")) if cdi_dir.is_dir() else []


def entries_of(directory: Path) -> list[Path]:
    return sorted(directory.iterdir()) if directory.is_dir() else []


def node_kubeconfig(plane: Any, name: str) -> Path:
    """A kubeconfig with the node's own identity, so the stand-in is held to what a kubelet may do."""
    path: Path = plane.client_kubeconfig(
        name=f"node-{name}", user=f"system:node:{name}", groups=("system:nodes",)
    )
    return path
