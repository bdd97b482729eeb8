"""A vgpu claim on the real node, shared by two containers of one pod: containerd applies the plugin's CDI
spec, the containers really preload libtessera.so (from the CDI mount) in front of the fake libcuda.so.1 (from
the driver mount), and their allocations stop at exactly the claim's limit, counted across both containers."""

from __future__ import annotations

import pytest

from e2e.harness.testbed import SimCluster
from e2e.realnode.driver import CONTAINER_LIBCUDA
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, probe_pod, vgpu

from .helpers import (
    MIB,
    apply,
    claim_of,
    device_nodes,
    gpu_index,
    limited_gpu,
    mounts,
    published_attribute,
    report,
    results,
    running,
)

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

LIMIT_MIB = 3000
HELD_MIB = 1000


def test_vgpu_limit_is_exact_and_the_region_is_shared_by_two_containers(
    bed: SimCluster, real_node: RealNode, real_ns: str
) -> None:
    apply(
        bed,
        real_ns,
        [
            claim_template("slice", vgpu(f"{LIMIT_MIB}Mi", "30")),
            probe_pod(
                "vgpu",
                node=real_node.name,
                templates={"gpu": "slice"},
                containers=[
                    ProbeContainer("holder", ("hold", str(HELD_MIB)), claims=("gpu",)),
                    # waits until the claim shows the holder's allocation (and both contexts), then fills
                    ProbeContainer("filler", ("fill-after", str(HELD_MIB + 1)), claims=("gpu",)),
                ],
            ),
        ],
    )
    pod = running(real_node, real_ns, "vgpu")
    holder, filler = report(real_node, pod, "holder"), report(real_node, pod, "filler")
    [result] = results(real_node, real_ns, pod, "gpu")
    assert result["consumedCapacity"]["memory"] == f"{LIMIT_MIB}Mi"
    index = gpu_index(result["device"])
    uuid = published_attribute(real_node, f"gpu-{index}", "uuid")
    claim_uid = claim_of(real_node, real_ns, pod, "gpu")["metadata"]["uid"]
    claim_dir = f"/var/run/tessera/claims/{claim_uid}"
    limit = LIMIT_MIB * MIB

    for r in (holder, filler):
        assert r["cuInit"] == 0
        # CUDA sees the claim's GPU (by UUID, as the limits file names it) with the limit as its total
        gpu = limited_gpu(r)
        assert gpu["uuid"] == uuid and gpu["total"] == limit
        env = r["env"]
        assert env["LD_PRELOAD"] == "/usr/local/tessera/lib/libtessera.so"
        assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{LIMIT_MIB}m"
        assert env["CUDA_DEVICE_SM_LIMIT_0"] == "30"
        assert env[f"TESSERA_CLAIM_DIR_{claim_uid.replace('-', '_')}"] == claim_dir
        assert env["CUDA_DEVICE_MEMORY_SHARED_CACHE"] == f"{claim_dir}/region"
        # really loaded: the library from the CDI mount, libcuda from the driver root
        assert "/usr/local/tessera/lib/libtessera.so" in r["libraries"]
        assert CONTAINER_LIBCUDA in r["libraries"]
        m = mounts(r)
        assert m["/usr/local/tessera/lib/libtessera.so"].startswith("ro,")
        assert m[claim_dir].startswith("rw,")
        assert m[CONTAINER_LIBCUDA].startswith("ro,")
        assert m[f"{claim_dir}/limits"].startswith("ro,")  # a root tenant cannot raise its own limits
        [seen] = r["claimDirs"]
        assert seen["path"] == claim_dir and sorted(seen["entries"]) == ["limits", "region"]
        nodes = device_nodes(r)
        assert nodes[f"/dev/nvidia{index}"] == (195, index)
        assert nodes["/dev/nvidiactl"] == (195, 255)
        assert f"/dev/nvidia{1 - index}" not in nodes

    held = limited_gpu(holder)
    assert held["allocated"] == HELD_MIB * MIB
    context = limit - held["freeBefore"]  # the holder's CUDA context, charged to the claim
    assert context > 0
    filled = limited_gpu(filler)
    # the filler saw the holder's memory and context in the claim's shared region ...
    assert filler["waitedUsed"] >= HELD_MIB * MIB + context
    # ... and got exactly what was left: the claim ends at its limit, not a byte over or under
    assert filled["allocated"] == filled["freeBefore"] == limit - filler["waitedUsed"]
    # the host side of the claim directory: the node's limits (never mounted writable) and the shared
    # directory holding the region both containers wrote
    [host_dir] = [d for d in real_node.claim_dirs() if d.name == claim_uid]
    assert sorted(p.name for p in host_dir.iterdir()) == ["limits", "shared"]
    assert "region" in {p.name for p in (host_dir / "shared").iterdir()}
