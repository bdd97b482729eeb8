"""The node's configuration documents: valid TOML/JSON with the settings this machine needs."""

from __future__ import annotations

import tomllib
from pathlib import Path

from e2e.controlplane.settings import FEATURE_GATES
from e2e.realnode.config import (
    GRPC_MAX_UNIX_PATH,
    MAX_ROOT_BYTES,
    PAUSE_IMAGE,
    KubeletPorts,
    NodeLayout,
    cni_config,
    containerd_config,
    kubelet_config,
)
from kubelet_plugin.node.paths import PluginPaths

LAYOUT = NodeLayout(root=Path("/tmp/rnabc"))


def test_containerd_config() -> None:
    config = tomllib.loads(containerd_config(LAYOUT, runc=Path("/c/runc"), cni_bin=Path("/c/cni")))
    assert config["version"] == 4 and config["imports"] == []
    assert config["plugins"]["io.containerd.server.v1.grpc"]["address"] == str(LAYOUT.containerd_socket)
    runtime = config["plugins"]["io.containerd.cri.v1.runtime"]
    # CDI specs from where the plugin writes them (its --root is the node's root)
    assert str(PluginPaths.under(LAYOUT.root).cdi_dir) in runtime["cdi_spec_dirs"]
    options = runtime["containerd"]["runtimes"]["runc"]["options"]
    assert options == {"BinaryName": "/c/runc", "Root": str(LAYOUT.runc_root), "SystemdCgroup": False}
    assert runtime["cni"] == {"bin_dirs": ["/c/cni"], "conf_dir": str(LAYOUT.cni_conf_dir)}
    assert config["plugins"]["io.containerd.cri.v1.images"]["pinned_images"]["sandbox"] == PAUSE_IMAGE
    assert "io.containerd.nri.v1.nri" in config["disabled_plugins"]


def test_kubelet_config() -> None:
    config = kubelet_config(
        LAYOUT,
        cgroup_root="/tessera-x",
        client_ca=Path("/pki/ca.crt"),
        ports=KubeletPorts(1, 2),
        feature_gates=FEATURE_GATES,
    )
    assert config["cgroupDriver"] == "cgroupfs" and config["failCgroupV1"] is False
    assert config["failSwapOn"] is False and config["cgroupRoot"] == "/tessera-x"
    assert config["containerRuntimeEndpoint"] == f"unix://{LAYOUT.containerd_socket}"
    assert config["authentication"]["x509"]["clientCAFile"] == "/pki/ca.crt"
    assert config["featureGates"] == FEATURE_GATES
    # the plugin registers in the kubelet's plugins_registry below the same root
    assert LAYOUT.registry_dir == PluginPaths.under(LAYOUT.root).registry_dir


def test_cni_config_keeps_its_state_below_the_root() -> None:
    [plugin] = cni_config(LAYOUT)["plugins"]
    assert plugin["type"] == "tap" and plugin["ipam"]["dataDir"].startswith(str(LAYOUT.root))


def test_a_root_of_the_longest_allowed_length_binds_a_rolling_update_socket() -> None:
    root = Path("/" + "r" * (MAX_ROOT_BYTES - 1))
    paths = PluginPaths.under(root, pod_uid="0" * 8 + "-0000-0000-0000-" + "0" * 12)
    assert len(str(paths.registration_socket)) == 105


def test_grpc_binds_105_byte_unix_paths_and_refuses_106(tmp_path: Path) -> None:
    """The limit MAX_ROOT_BYTES is derived from (config.GRPC_MAX_UNIX_PATH)."""
    from concurrent import futures  # noqa: PLC0415

    import grpc  # noqa: PLC0415

    for length, binds in ((GRPC_MAX_UNIX_PATH, True), (GRPC_MAX_UNIX_PATH + 1, False)):
        path = Path("/tmp") / f"{tmp_path.name[:8]}{'x' * 200}"[: length - len("/tmp/")]
        assert len(str(path)) == length
        server = grpc.server(futures.ThreadPoolExecutor(max_workers=1))
        try:
            server.add_insecure_port(f"unix://{path}")
            bound = True
        except RuntimeError:
            bound = False
        finally:
            server.stop(None)
            path.unlink(missing_ok=True)
        assert bound is binds
