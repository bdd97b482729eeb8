"""The documented commands that need a control plane, in their smoke forms (tests/README.md, "Smoke forms").

The benchmarks and the demo run as a user runs them, `make … SMOKE=1`: each starts its own control plane as
its full form does (its client rates, its clean etcd), from the binaries `make test` built, then does one tiny
round of its own work. The `tessera` subcommands that talk to an API server run against the session's control
plane: `tessera plugin` on a node of its own (no Node object: nothing is scheduled there), its probes,
`tessera explain --node` on what it published, and `tessera cleanup` serving once the plugin is gone."""

from __future__ import annotations

import os
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

from e2e.controlplane.binaries import Binaries, ensure_built
from e2e.controlplane.launcher import ControlPlane
from e2e.harness.kube import Kubectl, wait_for
from e2e.harness.testbed import apply_device_classes
from e2e.harness.webhook import helm_binary
from kubelet_plugin.node.paths import PluginPaths
from tests.support.driver_root import install_driver
from tests.support.kubelet_client import register, wait_for_socket
from tests.support.smoke import REPO, covers, lines_with, make_env, make_smoke

pytestmark = pytest.mark.e2e
TESSERA = Path(sys.executable).with_name("tessera")
NODE_FILE = REPO / "e2e" / "nodes" / "h100x8.yaml"
NODE = "smoke-commands"


@pytest.fixture(scope="module")
def binaries() -> Binaries:
    """The control plane's binaries, as the session's control plane finds them (built only when asked)."""
    return ensure_built(allow_build=os.environ.get("TESSERA_E2E_BUILD") == "1")


@covers("make bench-e2e")
@pytest.mark.timeout(420)
def test_bench_e2e_smoke(binaries: Binaries) -> None:
    done = make_smoke("bench-e2e", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    missing = lines_with(
        done.stdout,
        "[production] starting 1 simulated 8 x H100 nodes",
        "end to end on 1 nodes x 8 H100",
        "2 vGPU pods at once: create -> Running",
        "one pod at a time (1 pods)",
        "vgpu x2, claims from templates",
        "whole-gpu x8, claims made beforehand",
        "mig-1g.10gb x2, claims made beforehand",
    )
    assert missing == [], done.stdout


@covers("make bench-order")
@pytest.mark.timeout(420)
def test_bench_order_smoke(binaries: Binaries) -> None:
    done = make_smoke("bench-order", timeout=400)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    runs = [line for line in out.splitlines() if line.startswith("order=")]
    assert len(runs) == 4, out  # two orders, the default mix and the aligned one
    assert all("seed=1 " in r and "placed=3 " in r for r in runs), out
    missing = lines_with(
        out, "total order=by-gpu seeds=1", "x4_lost_at_total=", "per seed, fragmentation-aware"
    )
    assert missing == [], out


@covers("make bench-webhook", "tessera webhook")
@pytest.mark.timeout(300)
def test_bench_webhook_smoke(binaries: Binaries) -> None:
    if helm_binary() is None:
        pytest.fail("no helm: run `bash deploy/helm/build-helm.sh` (make test does)", pytrace=False)
    done = make_smoke("bench-webhook", timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    missing = lines_with(
        done.stdout,
        "webhook: 20 pods/s for 1 s",
        "direct AdmissionReview over HTTPS (client)",
        "  of which in the webhook (its log)",
        "pod create via API server, no GPU (baseline)",
        "pod create via API server, HAMi GPU request",
        "webhook memory: RSS",
        "--smoke:",
    )
    assert missing == [], done.stdout


@covers("make demo", "make demo NVML=fake", "make demo-down")
@pytest.mark.timeout(420)
def test_demo_smoke_up_and_down(binaries: Binaries, node_root: Path) -> None:
    """`make demo NVML=fake` with one example (the plain `make demo` differs only in the nodes' backend, the
    one every other scenario runs on), then `make demo-down`, which leaves no process behind."""
    state = f"DEMO_STATE={node_root}"  # short: the nodes' unix sockets live below it
    try:
        up = make_smoke("demo", "NVML=fake", state, timeout=380)
    finally:
        down = make_smoke("demo-down", state, timeout=120)
    assert up.returncode == 0, up.stdout + up.stderr
    missing = lines_with(
        up.stdout,
        "==> starting node h100x8 (NVML over the fake libnvidia-ml)",
        "    03-vgpu.yaml: vgpu-3000mi-30",
        "$ kubectl describe resourceclaim",
        "The demo keeps running.",
        "Stop it with: make demo-down",
    )
    assert missing == [], up.stdout
    assert down.returncode == 0 and "demo stopped (" in down.stdout, down.stdout + down.stderr
    assert "demo stopped (0 processes)" not in down.stdout


@covers("make test-k8s K8S_VERSION=1.35.4")
@pytest.mark.timeout(300)
def test_test_k8s_names_its_release_and_collects_the_suite(binaries: Binaries) -> None:
    """`make test-k8s` without a release says which to name; with one (the legacy release `make test` built),
    its smoke form collects the suite it would run."""
    bare = subprocess.run(
        ["make", "--no-print-directory", "test-k8s"],
        cwd=REPO,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert bare.returncode == 2 and "name a release, e.g. K8S_VERSION=" in bare.stderr, bare.stderr
    done = make_smoke("test-k8s", "K8S_VERSION=1.35.4", timeout=280)
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    collected = [line for line in done.stdout.splitlines() if "::" in line]
    assert any(line.startswith("e2e/scenarios/test_vgpu.py::") for line in collected), done.stdout[-3000:]
    assert not any(line.startswith("e2e/scenarios/realnode/") for line in collected)  # not the real node


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
    apply_device_classes(Kubectl(control_plane.binaries.kubectl, control_plane.kubeconfig))  # idempotent
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
