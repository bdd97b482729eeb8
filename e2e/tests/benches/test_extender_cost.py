"""The extender cost bench: the cluster it builds (half the GPUs held, every claim's device in its node's
slices, a bound pod per claim) and its smoke form through make, which also checks that the node views
answered as the full read on every call."""

from __future__ import annotations

import pytest

from e2e.benches.extender_cost import cluster_objects
from e2e.benches.trace.records import TraceNode
from scheduler_extender.__main__ import read_mix
from tests.support.smoke import covers, make_smoke


def test_the_fill_holds_about_half_the_gpus_each_on_a_published_device_with_a_bound_pod() -> None:
    nodes = [
        TraceNode(name=f"n{i}", cpu_milli=96000, memory_mib=393216, gpus=8, model="V100M32")
        for i in range(12)
    ]
    found = cluster_objects(nodes, seed=7, mix=read_mix(None))
    devices = {
        (s["spec"]["pool"]["name"], d["name"])
        for s in found["slices"]
        for d in s["spec"].get("devices") or []
    }
    results = [r for c in found["claims"] for r in c["status"]["allocation"]["devices"]["results"]]
    assert 0.35 < len(results) / 96 < 0.65
    assert all((r["pool"], r["device"]) in devices for r in results)
    assert {r["device"].endswith("-vgpu") for r in results} == {True, False}  # shares and whole GPUs
    assert [p["spec"]["nodeName"] for p in found["pods"]] == [r["pool"] for r in results]
    assert [n["metadata"]["name"] for n in found["nodes"]] == [n.name for n in nodes]


@covers("make bench-extender SMOKE=1")
@pytest.mark.timeout(120)
def test_the_smoke_bench_prints_every_path_for_both_pods() -> None:
    done = make_smoke("bench-extender", timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr
    lines = [line for line in done.stdout.splitlines() if line.startswith("extender-cost ")]
    assert [(line.split(" pod=")[1].split()[0], line.split(" path=")[1].split()[0]) for line in lines] == [
        (pod, path) for pod in ("share", "whole") for path in ("uncached", "views", "views-new", "fill-new")
    ], done.stdout
    assert all(" median=" in line and " p95=" in line for line in lines), done.stdout
