"""One ResourceClaim used by two pods on the real node: the kubelet prepares it once (one CDI spec, one
claim directory), both pods' containers share its accounting region, and it is unprepared only when the last
pod goes."""

from __future__ import annotations

import pytest

from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, probe_pod, resource_claim, vgpu

from .helpers import MIB, apply, claim_of, delete_pod, limited_gpu, report, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

LIMIT_MIB = 2000
HELD_MIB = 500


def test_claim_shared_by_two_pods(bed: SimCluster, real_node: RealNode, real_ns: str) -> None:
    apply(
        bed,
        real_ns,
        [
            resource_claim("shared", vgpu(f"{LIMIT_MIB}Mi", "20")),
            probe_pod(
                "first",
                node=real_node.name,
                claims={"gpu": "shared"},
                containers=[ProbeContainer("cuda", ("hold", str(HELD_MIB)), claims=("gpu",))],
            ),
            probe_pod(
                "second",
                node=real_node.name,
                claims={"gpu": "shared"},
                containers=[ProbeContainer("cuda", ("fill-after", str(HELD_MIB + 1)), claims=("gpu",))],
            ),
        ],
    )
    first, second = running(real_node, real_ns, "first"), running(real_node, real_ns, "second")
    held, filled = report(real_node, first, "cuda"), report(real_node, second, "cuda")
    uid = claim_of(real_node, real_ns, first, "gpu")["metadata"]["uid"]

    # prepared once for both pods
    [spec] = real_node.cdi_specs()
    assert uid in spec.name
    assert real_node.kubelet_claim_pods()[uid] == {first["metadata"]["uid"], second["metadata"]["uid"]}
    claim_dir = f"/var/run/tessera/claims/{uid}"
    assert [d["path"] for d in held["claimDirs"]] == [d["path"] for d in filled["claimDirs"]] == [claim_dir]
    # one region across pods: the second pod's allocations stop where the first pod's leave off
    limit = LIMIT_MIB * MIB
    assert limited_gpu(held)["allocated"] == HELD_MIB * MIB
    context = limit - limited_gpu(held)["freeBefore"]
    assert filled["waitedUsed"] >= HELD_MIB * MIB + context
    assert limited_gpu(filled)["allocated"] == limit - filled["waitedUsed"]

    delete_pod(real_node, real_ns, "first")
    # still prepared for the second pod
    assert len(real_node.cdi_specs()) == 1 and [d.name for d in real_node.claim_dirs()] == [uid]
    assert real_node.kubelet_claim_pods()[uid] == {second["metadata"]["uid"]}
    delete_pod(real_node, real_ns, "second")
    assert real_node.leftovers() == []
