"""One real node: the upstream kubelet and containerd (with runc and CNI) in their own namespaces, registered
with the e2e control plane, and Tessera installed onto it as a user installs it: our image imported into its
containerd and the chart installed with `helm install` (e2e.realnode.chart), the plugin running only in the
DaemonSet's container and serving the kubelet through its real plugin watcher.

The node's NVIDIA driver is a driver root laid out as a host install with the fake driver in it
(e2e.realnode.driver): the plugin reads NVML from there, and claims' containers get libcuda.so.1 from there
by CDI; the interception library is the one in our image, installed by the chart's init container: a vgpu
container really preloads libtessera.so and really loads the fake libcuda.so.1.
"""

from __future__ import annotations

import json
import secrets
import subprocess
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.names import DRIVER_NAME
from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.nodes import delete_node
from e2e.controlplane.processes import log_tail
from e2e.controlplane.settings import FEATURE_GATES
from e2e.harness.kube import Json, wait_for
from e2e.harness.node import (
    cdi_specs_in,
    entries_of,
    node_name_of,
)
from e2e.realnode import cgroups
from e2e.realnode.binaries import NodeBinaries
from e2e.realnode.chart import IMAGE_REPOSITORY, ChartPlugin, helm_binary, image_archive
from e2e.realnode.checkpoints import PreparedClaim, kubelet_claim_pods, kubelet_prepared, plugin_prepared
from e2e.realnode.config import (
    KERNEL_TUNABLES,
    MAX_ROOT_BYTES,
    KubeletPorts,
    NodeLayout,
    cni_config,
    containerd_config,
    kubelet_args,
    kubelet_config,
)
from e2e.realnode.driver import FakeDriverRoot
from e2e.realnode.errors import RealNodeError
from e2e.realnode.metrics import DraCounts, fetch_metrics, parse_dra_counts
from e2e.realnode.namespaces import NodeNamespaces, NodeProcess
from e2e.realnode.pod_logs import container_log_dir, probe_report
from kubelet_plugin.node.paths import PluginPaths
from tests.support.loopback import free_ports

log = structlog.get_logger(__name__)

NOT_READY_TAINT = "node.kubernetes.io/not-ready"
_MERGE_PATCH = "application/merge-patch+json"


def short_root(base: Path = Path("/tmp")) -> Path:
    """A fresh directory with a path short enough for the plugin's per-pod sockets (config.MAX_ROOT_BYTES)."""
    for _ in range(100):
        root = base / f"rn{secrets.token_hex(2)[:3]}"
        if len(str(root)) > MAX_ROOT_BYTES:
            raise RealNodeError(
                f"{base} is too long a base for the real node's root ({MAX_ROOT_BYTES} bytes)"
            )
        try:
            root.mkdir(mode=0o755)
        except FileExistsError:
            continue
        return root
    raise RealNodeError(f"no free short directory name under {base}")


class RealNode:
    def __init__(
        self,
        *,
        plane: ControlPlane,
        api: k8s.ApiClient,
        binaries: NodeBinaries,
        node_file: Path,
        root: Path,
    ) -> None:
        self.plane = plane
        self.api = api
        self.binaries = binaries
        self.node_file = node_file.resolve()
        self.name = node_name_of(node_file)
        self.layout = NodeLayout(root=root)
        self.cgroup_root = f"tessera-{self.name}-{root.name}"
        self.namespaces = NodeNamespaces(root=root, init=binaries.pause, tunables=KERNEL_TUNABLES)
        self.containerd: NodeProcess | None = None
        self.kubelet: NodeProcess | None = None
        self.driver = FakeDriverRoot.under(root, node_file=self.node_file)
        self.chart = ChartPlugin(
            api=api,
            admin_kubeconfig=plane.kubeconfig,
            server=plane.server,
            node_name=self.name,
            root=root,
            pod_logs=self.layout.pod_logs,
            driver=self.driver,
            cgroup_root=self.cgroup_root,
            helm=helm_binary(),
        )
        self.image = image_archive()
        self._ports = KubeletPorts(*free_ports(2))
        (self.metrics_port,) = free_ports(1)
        self.install_started = self.install_s = (
            0.0  # `helm install`: when, and how long until the plugin served
        )
        self._kubeconfig: Path | None = None

    # ---- paths ------------------------------------------------------------------------------------------

    @property
    def root(self) -> Path:
        return self.layout.root

    def plugin_paths(self, pod_uid: str | None = None) -> PluginPaths:
        return PluginPaths.under(self.root, pod_uid=pod_uid)

    @property
    def logs(self) -> Path:
        return self.layout.logs

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self, *, timeout_s: float = 120.0) -> None:
        deadline = time.monotonic() + timeout_s
        for d in self.layout.directories():
            d.mkdir(parents=True, exist_ok=True)
        self._write_configs()
        self.driver.lay_out()
        cgroups.create(self.cgroup_root)
        self.namespaces.start()
        self.namespaces.bind(*self.driver.state_mount)
        self.start_containerd()
        self.import_images()
        self.start_kubelet(timeout_s=max(10.0, deadline - time.monotonic()))
        self.install_started = started = time.monotonic()
        self.chart.install(metrics_port=self.metrics_port, timeout_s=max(30.0, deadline - time.monotonic()))
        self.install_s = time.monotonic() - started
        log.info("realnode.ready", node=self.name, root=str(self.root), install_s=round(self.install_s, 1))

    def _write_configs(self) -> None:
        c = self.layout.config_dir
        (c / "containerd.toml").write_text(
            containerd_config(self.layout, runc=self.binaries.runc, cni_bin=self.binaries.cni_dir)
        )
        (self.layout.cni_conf_dir / "10-tessera-e2e.conflist").write_text(
            json.dumps(cni_config(self.layout), indent=2)
        )
        config = kubelet_config(
            self.layout,
            cgroup_root=f"/{self.cgroup_root}",
            client_ca=self.plane.pki.ca.cert,
            ports=self._ports,
            feature_gates=FEATURE_GATES,
        )
        (c / "kubelet.yaml").write_text(json.dumps(config, indent=2))
        self._kubeconfig = self.plane.client_kubeconfig(
            name=f"kubelet-{self.name}", user=f"system:node:{self.name}", groups=("system:nodes",)
        )

    def _env(self) -> dict[str, str]:
        system = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
        return {"PATH": f"{self.binaries.containerd.parent}:{system}"}

    def start_containerd(self, *, timeout_s: float = 30.0) -> None:
        self.containerd = self.namespaces.spawn(
            name="containerd",
            binary=self.binaries.containerd,
            args=["--config", str(self.layout.config_dir / "containerd.toml")],
            log_path=self.logs / "containerd.log",
            env=self._env(),
        )

        def answers() -> bool:
            self._check(self.containerd)
            return (
                self.layout.containerd_socket.exists() and self._ctr("version", check=False).returncode == 0
            )

        wait_for("containerd to answer", answers, timeout_s=timeout_s, interval_s=0.2)

    def _ctr(self, *args: str, check: bool = True) -> subprocess.CompletedProcess[str]:
        result = subprocess.run(
            [str(self.binaries.ctr), "--address", str(self.layout.containerd_socket), "-n", "k8s.io", *args],
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise RealNodeError(f"ctr {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}")
        return result

    def import_images(self) -> None:
        for archive in (*self.binaries.images, self.image):
            self._ctr("images", "import", str(archive))
        log.info(
            "realnode.images", node=self.name, images=[a.name for a in (*self.binaries.images, self.image)]
        )

    def images(self) -> list[str]:
        """The image names the node's containerd holds."""
        return self._ctr("images", "ls", "-q").stdout.split()

    def tag_image(self, tag: str) -> None:
        """Our image under another tag, as a new release of it would arrive (for `helm upgrade`)."""
        source = f"{IMAGE_REPOSITORY}:{self.chart.image_tag}"
        self._ctr("images", "tag", "--force", source, f"{IMAGE_REPOSITORY}:{tag}")

    def start_kubelet(self, *, timeout_s: float = 60.0) -> None:
        assert self._kubeconfig is not None
        self.kubelet = self.namespaces.spawn(
            name="kubelet",
            binary=self.binaries.kubelet,
            args=kubelet_args(
                self.layout,
                config=self.layout.config_dir / "kubelet.yaml",
                kubeconfig=self._kubeconfig,
                node_name=self.name,
            ),
            log_path=self.logs / "kubelet.log",
            env=self._env(),
        )
        since = datetime.now(UTC) - timedelta(seconds=1)
        wait_for(
            f"node {self.name} to be Ready",
            lambda: self._ready(since=since),
            timeout_s=timeout_s,
            interval_s=0.2,
        )
        self._lift_not_ready_taint()

    def _ready(self, *, since: datetime) -> bool:
        """Ready, as reported by a kubelet started at `since` (a restarted one finds the old condition)."""
        self._check(self.kubelet)
        try:
            node = k8s.CoreV1Api(self.api).read_node(self.name)
        except ApiException as e:
            if e.status == 404:
                return False
            raise
        conditions = (node.status.conditions if node.status else None) or []
        return any(
            c.type == "Ready"
            and c.status == "True"
            and c.last_heartbeat_time is not None
            and c.last_heartbeat_time >= since
            for c in conditions
        )

    def _lift_not_ready_taint(self) -> None:
        # TaintNodesByCondition put it on at registration; the node-lifecycle controller that would lift it
        # once the kubelet reports Ready does not run in the e2e control plane (the stand-in nodes renew no
        # leases), so it is lifted here. The node's own taint (tessera.dev/realnode) stays.
        core = k8s.CoreV1Api(self.api)
        node = core.read_node(self.name)
        taints = [t for t in ((node.spec.taints if node.spec else None) or []) if t.key != NOT_READY_TAINT]
        body = {"spec": {"taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints]}}
        core.patch_node(self.name, body, _content_type=_MERGE_PATCH)

    def restart_kubelet(self, *, timeout_s: float = 60.0) -> None:
        """Stops the kubelet (SIGTERM) and starts it again with the same configuration and state."""
        if self.kubelet is not None:
            self.kubelet.stop()
        self.start_kubelet(timeout_s=timeout_s)

    # ---- stopping ---------------------------------------------------------------------------------------

    def stop(self) -> None:
        """Kubelet and containerd (gracefully), then everything left in the namespaces (the pods' containers
        and shims, the MPS daemons); the cgroups, the pods and the Node object go too. The chart's release
        stays in the API: the control plane is the session's."""
        for component in (self.kubelet, self.containerd):
            if component is not None:
                component.stop()
        self.kubelet = self.containerd = None
        self.namespaces.stop()
        cgroups.remove(self.cgroup_root)
        self._delete_pods_of_node()
        delete_node(self.api, name=self.name)
        log.info("realnode.stopped", node=self.name)

    def _delete_pods_of_node(self) -> None:
        core = k8s.CoreV1Api(self.api)
        response: Any = core.list_pod_for_all_namespaces(
            field_selector=f"spec.nodeName={self.name}", _preload_content=False
        )
        for pod in json.loads(response.data).get("items") or []:
            meta = pod["metadata"]
            try:
                core.delete_namespaced_pod(meta["name"], meta["namespace"], grace_period_seconds=0)
            except ApiException as e:
                if e.status != 404:
                    raise

    def _check(self, process: NodeProcess | None) -> None:
        if process is not None and not process.alive():
            raise RealNodeError(f"{process.name} of {self.name} exited:\n{log_tail(process.log)}")

    # ---- looking ----------------------------------------------------------------------------------------

    def cdi_specs(self) -> list[Path]:
        return cdi_specs_in(self.plugin_paths().cdi_dir)

    def claim_dirs(self) -> list[Path]:
        return entries_of(self.plugin_paths().claims_dir)

    def mig_instances(self) -> list[tuple[str, str]]:
        return self.driver.host_view().mig_instances()

    def mig_cap_minors(self) -> dict[str, tuple[int, int]]:
        return self.driver.mig_cap_minors()

    def kubelet_prepared(self) -> dict[str, PreparedClaim]:
        return kubelet_prepared(self.layout.kubelet_checkpoint)

    def kubelet_claim_pods(self) -> dict[str, frozenset[str]]:
        return kubelet_claim_pods(self.layout.kubelet_checkpoint)

    def plugin_prepared(self) -> dict[str, PreparedClaim]:
        return plugin_prepared(self.plugin_paths().checkpoint_file)

    def dra_counts(self) -> DraCounts:
        """The kubelet's counts of DRA operations and gRPC calls to Tessera's driver (since it started)."""
        text = fetch_metrics(port=self._ports.port, client=self.plane.pki.admin)
        return parse_dra_counts(text, driver=DRIVER_NAME)

    def sockets(self) -> list[Path]:
        paths = self.plugin_paths()
        return sorted(
            [*paths.plugin_dir.glob("*.sock"), *self.layout.registry_dir.glob(f"{DRIVER_NAME}*.sock")]
        )

    def probe(self, pod: Json, container: str) -> dict[str, Any] | None:
        meta = pod["metadata"]
        directory = container_log_dir(
            self.layout.pod_logs,
            namespace=meta["namespace"],
            name=meta["name"],
            uid=meta["uid"],
            container=container,
        )
        return probe_report(directory)

    def leftovers(self) -> list[str]:
        found = [f"CDI spec {p.name}" for p in self.cdi_specs()]
        found += [f"claim dir {p.name}" for p in self.claim_dirs()]
        found += [f"MIG instance {mig} on {gpu}" for gpu, mig in self.mig_instances()]
        found += [f"kubelet checkpoint claim {uid}" for uid in self.kubelet_prepared()]
        found += [f"plugin checkpoint claim {uid}" for uid in self.plugin_prepared()]
        return found
