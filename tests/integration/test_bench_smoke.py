"""The benchmarks that need no control plane, and `make manifests`, in their smoke forms (tests/README.md,
"Smoke forms"): each runs as a user runs it, `make bench-… SMOKE=1`, through its own code on a tiny scale,
and prints every line of its report. Nothing here judges a figure; a benchmark that stops, fails or drops a
line fails its test (`make bench-interceptor` stopped at its sharing lines for weeks, unseen)."""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path

import pytest

from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL
from tests.support.smoke import REPO, covers, lines_with, make_env, make_smoke

INTERCEPTOR_BUILD = REPO / "interceptor" / "build"


@covers("make bench-prepare")
@pytest.mark.timeout(240)
def test_bench_prepare_smoke() -> None:
    done = make_smoke("bench-prepare", timeout=220)
    assert done.returncode == 0, done.stdout + done.stderr
    missing = lines_with(
        done.stdout,
        "--smoke:",
        "simulated node h100x8.yaml: 3 single-claim calls, 1 x 128-claim calls",
        "prepare vgpu: fsyncs",
        "unprepare mig, switching MIG mode on (the simulated GPU's own file counts): checkpoint writes",
        "single p50 ms",
        "batch 128 max s",
        "tenant files",
        "prepare beside the cleanup ms",
        "RSS MiB",
    )
    assert missing == [], done.stdout
    assert "OVER target" not in done.stdout  # a smoke run judges nothing


@covers("make bench-metrics")
@pytest.mark.timeout(240)
def test_bench_metrics_smoke() -> None:
    if not (INTERCEPTOR_BUILD / "tests" / "tcuda").exists():
        pytest.skip("run `make dev` to build the interception library's test programs")
    done = make_smoke("bench-metrics", timeout=220)
    assert done.returncode == 0, done.stdout + done.stderr
    missing = lines_with(
        done.stdout,
        "--smoke:",
        "4 prepared vgpu claims, 4 live processes",
        "exposition:",
        "read 4 regions + render: p50",
        "the same without the /proc scan",
        "a full /proc scan",
        "HTTP scrape of the daemon: p50",
        "target read + render < 50 ms",
    )
    assert missing == [], done.stdout


@covers("make bench-interceptor", "make -C interceptor bench")
@pytest.mark.timeout(300)
def test_bench_interceptor_smoke() -> None:
    if not FAKE_MPS_CONTROL.exists():
        pytest.skip("run `make dev` to build the interception library and its fakes")
    done = make_smoke("bench-interceptor", timeout=280)
    assert done.returncode == 0, done.stdout + done.stderr
    out = done.stdout
    valgrind = shutil.which("valgrind") is not None
    missing = lines_with(
        out,
        "SMOKE=1: every line once",
        *(("cuLaunchKernel, no SM limit:", "cuMemAlloc+cuMemFree, limited:") if valgrind else ()),
        "run 1: cuLaunchKernel direct",
        "  cores 90: busy",
        "  cores 50, graph launches: busy",
        "SM accuracy:",
        "contention 30:70 ->",
        "contention 50:50 ->",
        "contention 20:30:50 ->",
        "graph replay cores 50 ->",
        "GPU sharing:",
        "burst 30(limit 100):70 idle ->",
        "burst 30(limit 100):70 busy ->",
        "burst 30(limit 50):70 idle ->",
        "burst wake ->",
        "burst first-kernel idle-gpu ->",
        "burst first-kernel busy-gpu ->",
        "burst:",
        "  two processes, no library ->",
        "  previous limiter, contention 30:70 ->",
        "  previous limiter, contention 20:20 ->",
        "  bucket contention 30:70, 0.5 ms kernels ->",
        "  one client at 100 % ->",
        "  clients 30:70 ->",
        "  clients 100:100 ->",
        "MPS calibration:",
        "  an MPS client beside a process without MPS (time-sliced) ->",
    )
    assert missing == [], out
    # every figure was measured: no empty share where a program failed
    assert " -> %" not in out and "->  %" not in out and "busy  %" not in out, out


@covers("make manifests")
@pytest.mark.timeout(180)
def test_make_manifests_renders_what_is_committed(tmp_path: Path) -> None:
    """`make manifests` in a copy of what it reads and writes: the same files as the repository's (it would
    rewrite them in place, which a test must not do)."""
    copy = tmp_path / "repo"
    for part in ("deploy", "deviceclasses", "dra_driver", "e2e/cluster/k8s"):
        shutil.copytree(REPO / part, copy / part, ignore=shutil.ignore_patterns("__pycache__"))
    shutil.copy(REPO / "Makefile", copy / "Makefile")
    (copy / ".venv").symlink_to(REPO / ".venv")
    done = subprocess.run(
        ["make", "--no-print-directory", "-o", "helm", "manifests"],
        cwd=copy,
        env=make_env(),
        capture_output=True,
        text=True,
        timeout=170,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.strip().endswith("deploy/manifests/tessera.yaml")
    written = [
        p.relative_to(copy)
        for part in ("deploy/manifests", "deploy/helm/tessera", "deviceclasses")
        for p in sorted((copy / part).rglob("*"))
        if p.is_file()
    ]
    differ = [str(p) for p in written if (copy / p).read_bytes() != (REPO / p).read_bytes()]
    assert written and differ == [], f"make manifests changes {differ}: run it and commit the result"
