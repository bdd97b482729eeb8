"""The documented `tessera` subcommands that talk to an API server, in their smoke forms (tests/README.md,
"Smoke forms"), against the session's control plane (the make targets that start planes of their own:
e2e/scenarios/own_plane/test_make_smoke.py): `tessera plugin` on a node of its own (no Node object: nothing
is scheduled there), its probes, `tessera explain --node` on what it published, and `tessera cleanup` serving
once the plugin is gone."""

from __future__ import annotations

import signal
import socket
import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.harness.kube import wait_for
from e2e.harness.server_apply import ServerApply
from e2e.harness.testbed import apply_device_classes
from kubelet_plugin.node.paths import PluginPaths
from tests.support.driver_root import install_driver
from tests.support.kubelet_client import register, wait_for_socket
from tests.support.smoke import REPO, covers

pytestmark = pytest.mark.e2e
TESSERA = Path(sys.executable).with_name("tessera")
NODE_FILE = REPO / "e2e" / "nodes" / "h100x8.yaml"
NODE = "smoke-commands"


# ---- tessera subcommands against the session's control plane -----------------------------------------


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def tessera(*args: str, code: int = 0) -> str:
    done = subprocess.run(
        [str(TESSERA), *args], cwd=REPO, capture_output=True, text=True, timeout=120, check=False
    )
    assert done.returncode == code, f"tessera {' '.join(args)}: {done.returncode}\n{done.stdout}{done.stderr}"
    return done.stdout


@pytest.fixture
def node_root() -> Iterator[Path]:
    """A short root: the plugin's unix socket paths may not pass 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="tsm-", dir="/tmp") as root:
        yield Path(root)


def _delete_slices(api: k8s.ApiClient) -> None:
    k8s.ResourceV1Api(api).delete_collection_resource_slice(field_selector=f"spec.nodeName={NODE}")


@covers(
    "tessera plugin",
    "tessera plugin --root DIR",
    "tessera plugin --metrics-address HOST:PORT",
    "tessera plugin --driver-root=<driverRoot> --driver-root-mount=/driver-root",
    "tessera plugin probe",
    "tessera plugin probe --ready",
    "tessera explain CLAIM --node NODE",
    "tessera explain default/<claim-name> --node <node>",
    "tessera explain deploy/inference.yaml --node gpu-node-7",
    "tessera cleanup",
)
@pytest.mark.timeout(240)
def test_plugin_probe_explain_and_cleanup_on_the_control_plane(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, e2e_namespace: str, node_root: Path
) -> None:
    apply_device_classes(ServerApply(k8s_api))  # idempotent
    driver = node_root / "driver"
    install_driver(driver)
    kubeconfig = str(control_plane.kubeconfig)
    port = _free_port()
    common = ["--node-name", NODE, "--root", str(node_root), "--kubeconfig", kubeconfig]
    common += ["--simulate", str(NODE_FILE), "--sim-state", str(node_root / "sim-state.json")]
    paths = PluginPaths.under(node_root)
    log = (node_root / "plugin.log").open("w")
    plugin = subprocess.Popen(
        [str(TESSERA), "plugin", *common, f"--metrics-address=127.0.0.1:{port}",
         f"--driver-root={driver}", f"--driver-root-mount={driver}"],
        cwd=REPO, stdout=log, stderr=subprocess.STDOUT,
    )  # fmt: skip
    try:
        wait_for_socket(paths.registration_socket, timeout=60)
        tessera("plugin", "probe", "--root", str(node_root))
        tessera("plugin", "probe", "--root", str(node_root), "--ready", "--timeout", "5", code=1)
        register(paths.registration_socket)  # the kubelet's part
        wait_for(
            "the plugin to be ready",
            lambda: subprocess.run(
                [str(TESSERA), "plugin", "probe", "--root", str(node_root), "--ready"],
                capture_output=True, timeout=60, check=False,
            ).returncode == 0,
            timeout_s=60,
        )  # fmt: skip
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
            assert b"tessera_gpu_healthy{" in r.read()

        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "one-vgpu"},
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "vgpu.tessera.dev"}}]}
            },
        }
        k8s.ResourceV1Api(k8s_api).create_namespaced_resource_claim(
            e2e_namespace, k8s.ResourceV1ResourceClaim.model_validate(claim)
        )
        cluster = ["--node", NODE, "--kubeconfig", kubeconfig]
        assert "can be allocated" in tessera("explain", f"{e2e_namespace}/one-vgpu", *cluster)
        hami = REPO / "admission" / "examples" / "hami-default-use.yaml"
        assert "can be allocated" in tessera("explain", str(hami), *cluster)
    finally:
        plugin.send_signal(signal.SIGTERM)
        plugin.wait(timeout=30)
        log.close()
    assert plugin.returncode == 0, (node_root / "plugin.log").read_text()[-3000:]

    # the plugin gone, `tessera cleanup` (the chart's cleanup DaemonSet) finds the node clean and says so
    done_file = node_root / "cleanup-done"
    cleanup = subprocess.Popen(
        [str(TESSERA), "cleanup", *common, "--done-file", str(done_file)],
        cwd=REPO, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True,
    )  # fmt: skip
    try:
        wait_for("the cleanup to find the node clean", done_file.exists, timeout_s=60)
    finally:
        cleanup.send_signal(signal.SIGTERM)
        out, err = cleanup.communicate(timeout=30)
        _delete_slices(k8s_api)
    assert cleanup.returncode == 0, err[-3000:]
    assert not paths.registration_socket.exists()
    assert out == ""  # serving prints no data; its log lines are on stderr
