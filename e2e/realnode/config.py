"""What the real node's kubelet, containerd and CNI are told (pure: layouts and documents, no I/O).

Every host path the node uses sits below one short root directory, so several nodes (and several test runs)
share a machine; the settings that this machine needs and why are listed in e2e/README.md ("The real node").
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.vocabulary.names import DRIVER_NAME

PAUSE_IMAGE = "tessera.dev/e2e/pause:v1"
PROBE_IMAGE = "tessera.dev/e2e/probe:v1"
REALNODE_TAINT_KEY = "tessera.dev/realnode"
REALNODE_LABEL = "tessera.dev/realnode"
# TEST-NET-2 (RFC 5737): the pods' addresses live only inside their own network namespaces.
POD_SUBNET = "198.51.100.0/24"
# The registration socket of a rolling update,
# <root>/var/lib/kubelet/plugins_registry/<driver>-<uid>-reg.sock, must bind: gRPC (grpcio 1.85) refuses
# unix socket paths of 106 bytes and more ("Path name should not have more than 107 characters"), and a pod
# UID takes 36, so the root may take at most this many bytes.
GRPC_MAX_UNIX_PATH = 105
MAX_ROOT_BYTES = GRPC_MAX_UNIX_PATH - len(
    f"/var/lib/kubelet/plugins_registry/{DRIVER_NAME}-{'0' * 36}-reg.sock"
)
# Shadowed inside the node's mount namespace (see holder.sh): the kubelet sets these at start and they are the
# machine's, shared with everyone else on it.
KERNEL_TUNABLES = (
    "vm/overcommit_memory",
    "vm/panic_on_oom",
    "kernel/panic",
    "kernel/panic_on_oops",
    "kernel/keys/root_maxkeys",
    "kernel/keys/root_maxbytes",
)


@dataclass(frozen=True, slots=True)
class NodeLayout:
    """The real node's directories and sockets below `root` (the same layout the plugin's --root uses)."""

    root: Path

    @property
    def kubelet_dir(self) -> Path:
        return self.root / "var/lib/kubelet"

    @property
    def containerd_root(self) -> Path:
        return self.root / "var/lib/containerd"

    @property
    def containerd_state(self) -> Path:
        return self.root / "run/containerd"

    @property
    def containerd_socket(self) -> Path:
        return self.containerd_state / "containerd.sock"

    @property
    def runc_root(self) -> Path:
        return self.root / "run/runc"

    @property
    def cni_conf_dir(self) -> Path:
        return self.root / "etc/cni/net.d"

    @property
    def cni_data_dir(self) -> Path:
        return self.root / "var/lib/cni/networks"

    @property
    def cdi_dirs(self) -> tuple[Path, Path]:
        return (self.root / "etc/cdi", self.root / "var/run/cdi")

    @property
    def static_pods(self) -> Path:
        return self.root / "etc/kubernetes/manifests"

    @property
    def pod_logs(self) -> Path:
        return self.root / "var/log/pods"

    @property
    def sysctl_dir(self) -> Path:
        return self.root / "sysctl"

    @property
    def config_dir(self) -> Path:
        return self.root / "config"

    @property
    def logs(self) -> Path:
        return self.root / "logs"

    @property
    def kubelet_checkpoint(self) -> Path:
        return self.kubelet_dir / "dra_manager_state"

    @property
    def registry_dir(self) -> Path:
        return self.kubelet_dir / "plugins_registry"

    def directories(self) -> list[Path]:
        return [
            self.kubelet_dir,
            self.containerd_root,
            self.containerd_state,
            self.runc_root,
            self.cni_conf_dir,
            self.cni_data_dir,
            *self.cdi_dirs,
            self.static_pods,
            self.pod_logs,
            self.sysctl_dir,
            self.config_dir,
            self.logs,
        ]


def _toml_string(value: str) -> str:
    return json.dumps(value)  # a TOML basic string is a JSON string for the characters paths use


def _toml_list(values: list[str]) -> str:
    return "[" + ", ".join(_toml_string(v) for v in values) + "]"


def containerd_config(layout: NodeLayout, *, runc: Path, cni_bin: Path) -> str:
    """containerd 2.x configuration (version 4). CDI is always on in 2.x; `cdi_spec_dirs` points it at the
    plugin's CDI directory. Plugins that would reach for global paths (/opt/containerd, the NRI socket in
    /var/run/nri) or need kernel features this machine lacks (erofs, blockfile) are off."""
    disabled = [
        "io.containerd.nri.v1.nri",
        "io.containerd.internal.v1.opt",
        "io.containerd.snapshotter.v1.erofs",
        "io.containerd.differ.v1.erofs",
        "io.containerd.snapshotter.v1.blockfile",
        "io.containerd.image-verifier.v1.bindir",
    ]
    runtime = "plugins.'io.containerd.cri.v1.runtime'"
    return f"""\
version = 4
root = {_toml_string(str(layout.containerd_root))}
state = {_toml_string(str(layout.containerd_state))}
imports = []
disabled_plugins = {_toml_list(disabled)}

[plugins.'io.containerd.server.v1.grpc']
  address = {_toml_string(str(layout.containerd_socket))}

[plugins.'io.containerd.server.v1.ttrpc']
  address = {_toml_string(str(layout.containerd_socket) + ".ttrpc")}

[plugins.'io.containerd.cri.v1.images']
  snapshotter = 'overlayfs'

[plugins.'io.containerd.cri.v1.images'.pinned_images]
  sandbox = {_toml_string(PAUSE_IMAGE)}

[{runtime}]
  cdi_spec_dirs = {_toml_list([str(d) for d in layout.cdi_dirs])}
  # no CAP_SYS_RESOURCE here: never ask runc for an oom_score_adj below containerd's own
  restrict_oom_score_adj = true
  netns_mounts_under_state_dir = true
  enable_criu = false
  max_container_log_line_size = -1

[{runtime}.containerd]
  default_runtime_name = 'runc'

[{runtime}.containerd.runtimes.runc]
  runtime_type = 'io.containerd.runc.v2'

[{runtime}.containerd.runtimes.runc.options]
  BinaryName = {_toml_string(str(runc))}
  Root = {_toml_string(str(layout.runc_root))}
  SystemdCgroup = false

[{runtime}.cni]
  bin_dirs = {_toml_list([str(cni_bin)])}
  conf_dir = {_toml_string(str(layout.cni_conf_dir))}

[plugins.'io.containerd.grpc.v1.cri']
  stream_server_address = '127.0.0.1'
  stream_server_port = '0'
"""


def cni_config(layout: NodeLayout) -> dict[str, Any]:
    """One network: a tap device inside the pod's network namespace with an address from host-local. This
    kernel has neither veth nor dummy links, and nothing here talks to a pod over the network."""
    return {
        "cniVersion": "1.0.0",
        "name": "tessera-e2e",
        "plugins": [
            {
                "type": "tap",
                "ipam": {
                    "type": "host-local",
                    "ranges": [[{"subnet": POD_SUBNET}]],
                    "dataDir": str(layout.cni_data_dir),
                },
            }
        ],
    }


@dataclass(frozen=True, slots=True)
class KubeletPorts:
    port: int
    healthz: int


def kubelet_config(
    layout: NodeLayout,
    *,
    cgroup_root: str,
    client_ca: Path,
    ports: KubeletPorts,
    feature_gates: Mapping[str, bool],
) -> dict[str, Any]:
    """The KubeletConfiguration; why each setting is there is in e2e/README.md ("The real node")."""
    return {
        "apiVersion": "kubelet.config.k8s.io/v1beta1",
        "kind": "KubeletConfiguration",
        "cgroupDriver": "cgroupfs",
        "failCgroupV1": False,
        "cgroupRoot": cgroup_root,
        "failSwapOn": False,
        "containerRuntimeEndpoint": f"unix://{layout.containerd_socket}",
        "staticPodPath": str(layout.static_pods),
        "podLogsDir": str(layout.pod_logs),
        "address": "127.0.0.1",
        "port": ports.port,
        "healthzBindAddress": "127.0.0.1",
        "healthzPort": ports.healthz,
        "readOnlyPort": 0,
        "authentication": {
            "anonymous": {"enabled": False},
            "webhook": {"enabled": False},
            "x509": {"clientCAFile": str(client_ca)},
        },
        "authorization": {"mode": "Webhook"},
        "featureGates": dict(feature_gates),
        "registerWithTaints": [{"key": REALNODE_TAINT_KEY, "value": "true", "effect": "NoSchedule"}],
        "oomScoreAdj": 0,
        "resolvConf": "",
        "imageGCHighThresholdPercent": 100,
        "imageGCLowThresholdPercent": 99,
        "evictionHard": {
            "memory.available": "100Mi",
            "nodefs.available": "1%",
            "nodefs.inodesFree": "1%",
            "imagefs.available": "1%",
        },
    }


def kubelet_args(
    layout: NodeLayout, *, config: Path, kubeconfig: Path, node_name: str, verbosity: int = 2
) -> list[str]:
    return [
        f"--config={config}",
        f"--kubeconfig={kubeconfig}",
        f"--root-dir={layout.kubelet_dir}",
        f"--hostname-override={node_name}",
        f"--node-labels={REALNODE_LABEL}=true",
        f"--v={verbosity}",
    ]
