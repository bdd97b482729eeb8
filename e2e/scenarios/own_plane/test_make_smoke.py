"""The documented make targets that start a control plane of their own, in their smoke forms (tests/README.md,
"Smoke forms"): the benchmarks and the demo run as a user runs them, `make … SMOKE=1`, each starting its own
control plane as its full form does (its client rates, its clean etcd), from the binaries `make test` built,
then one tiny round of its own work. They need no session plane, so each module of this folder is a
pytest-xdist scope of its own (the root conftest.py)."""

from __future__ import annotations

import os
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

from e2e.controlplane.binaries import Binaries, ensure_built
from e2e.harness.webhook import helm_binary
from tests.support.smoke import REPO, covers, lines_with, make_env, make_smoke

pytestmark = pytest.mark.e2e


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


@pytest.fixture
def node_root() -> Iterator[Path]:
    """A short root: the plugin's unix socket paths may not pass 107 bytes."""
    with tempfile.TemporaryDirectory(prefix="tsm-", dir="/tmp") as root:
        yield Path(root)
