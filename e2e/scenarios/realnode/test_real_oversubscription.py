"""Memory oversubscription on the real node, installed by the chart (docs/gpu-sharing.md, "Oversubscription"):
the node group set to memoryOversubscription 2 by `helm upgrade` publishes twice each GPU's memory (memory +
virtualMemory); two opted-in claims larger than a GPU prepare and their containers see their whole limit;
a claim without the opt-in that only the GPUs' virtualMemory could hold is never placed. The group is set back
afterwards."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver.vocabulary.names import Cap
from e2e.harness.kube import Json, allocated_results, get_claim, get_pod, pod_claim_name, wait_for
from e2e.harness.node import driver_slices
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_spec, claim_template, probe_pod, vgpu

from .helpers import apply, events, limited_gpu, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

GIB = 1 << 30


def _vgpu_capacity(node: RealNode) -> dict[str, dict[str, str]]:
    """The published capacity of each vgpu device of the real node, by device name."""
    return {
        d["name"]: {k: v["value"] for k, v in d.get("capacity", {}).items()}
        for s in driver_slices(node.api, node.name)
        for d in s["spec"].get("devices") or []
        if d["name"].endswith("-vgpu")
    }


def _published(node: RealNode, *, doubled: bool) -> dict[str, dict[str, str]]:
    def seen() -> dict[str, dict[str, str]] | None:
        caps = _vgpu_capacity(node)
        ok = caps and all((Cap.VIRTUAL_MEMORY in c) == doubled for c in caps.values())
        return caps if ok else None

    found: dict[str, dict[str, str]] = wait_for(
        f"the real node's vgpu devices {'with' if doubled else 'without'} virtualMemory", seen, timeout_s=120
    )
    return found


@pytest.fixture
def doubled(real_node: RealNode) -> Iterator[dict[str, dict[str, str]]]:
    """The node group at memoryOversubscription 2 (the plugin restarts with it), set back afterwards; listed
    before real_ns, so that the namespace is emptied (its claims unprepared) before the group is set back."""
    chart = real_node.chart
    chart.set_node_group(metrics_port=real_node.metrics_port, memoryOversubscription=2)
    try:
        yield _published(real_node, doubled=True)
    finally:
        chart.set_node_group(metrics_port=real_node.metrics_port)
        _published(real_node, doubled=False)
        chart.wait_settled()


def _big(name: str) -> list[Json]:
    spec = claim_spec(
        "vgpu-oversubscribed.tessera.dev",
        capacity={Cap.MEMORY: "40Gi", Cap.VIRTUAL_MEMORY: "60Gi", Cap.CORES: "0"},
    )
    return [claim_template(name, spec)]


def test_twice_the_memory_published_claims_larger_than_a_gpu_and_none_placed_off_the_device(
    bed: SimCluster, real_node: RealNode, doubled: dict[str, dict[str, str]], real_ns: str
) -> None:
    # every vgpu device: virtualMemory as much as memory (ratio 2), memory as before (the GPU's)
    assert all(c[Cap.VIRTUAL_MEMORY] == c[Cap.MEMORY] for c in doubled.values()), doubled
    gpu_mib = int(next(iter(doubled.values()))[Cap.MEMORY].removesuffix("Mi"))
    assert gpu_mib < 100 * 1024  # a claim of 100Gi is larger than a GPU
    apply(bed, real_ns, _big("big"))
    for i in (1, 2):
        apply(
            bed,
            real_ns,
            [
                probe_pod(
                    f"big-{i}",
                    node=real_node.name,
                    templates={"gpu": "big"},
                    containers=[ProbeContainer("probe", ("hold", "1"), claims=("gpu",))],
                )
            ],
        )
    devices: set[str] = set()
    for i in (1, 2):
        pod = running(real_node, real_ns, f"big-{i}", timeout_s=120)
        [result] = results(real_node, real_ns, pod, "gpu")
        assert result["consumedCapacity"][Cap.MEMORY] == "40Gi"
        assert result["consumedCapacity"][Cap.VIRTUAL_MEMORY] == "60Gi"
        devices.add(result["device"])
        # the container's CUDA (cuMemGetInfo through the library) sees the claim's whole limit, more than the
        # GPU has, and its allocation is served
        gpu = limited_gpu(report(real_node, pod, "probe"))
        assert (gpu["total"], gpu["allocated"], gpu["error"]) == (100 * GIB, 1 << 20, 0)
    assert devices == {"gpu-0-vgpu", "gpu-1-vgpu"}  # 40Gi of each GPU's memory is held for them
    # Each GPU has about 40Gi of memory left and 20Gi of virtualMemory: 60Gi without the opt-in fits in
    # neither's device memory, so it is not placed, whatever virtualMemory is left.
    apply(
        bed,
        real_ns,
        [
            claim_template("plain", vgpu("60Gi", "0")),
            probe_pod(
                "plain",
                node=real_node.name,
                templates={"gpu": "plain"},
                containers=[ProbeContainer("probe", ("report",), claims=("gpu",))],
            ),
        ],
    )
    wait_for(
        "the scheduler to refuse the plain claim",
        lambda: (
            any(
                e.startswith("FailedScheduling") and "cannot allocate all claims" in e
                for e in events(real_node, real_ns, "plain")
            )
            or None
        ),
        timeout_s=60,
    )
    plain = get_pod(real_node.api, real_ns, "plain")
    assert plain is not None and plain["status"]["phase"] == "Pending"
    claim = get_claim(real_node.api, real_ns, pod_claim_name(plain, "gpu"))
    assert claim is None or not allocated_results(claim), claim
