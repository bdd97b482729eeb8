"""A whole GPU on the real node: the container gets that GPU's device node and the control nodes through CDI,
the driver's files from the driver root, and no interception library; CUDA (the fake driver) is not limited.
The image has no CUDA library and asks the NVIDIA toolkit for every GPU (NVIDIA_VISIBLE_DEVICES=all, as CUDA
base images do): it runs CUDA through the claim alone and sees only the claim's GPU."""

from __future__ import annotations

import pytest

from e2e.harness.testbed import SimCluster
from e2e.realnode.driver import CONTAINER_LIBCUDA, CONTAINER_NVIDIA_SMI
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, probe_pod, whole_gpu

from .helpers import apply, device_nodes, gpu_index, mounts, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_whole_gpu(bed: SimCluster, real_node: RealNode, real_ns: str) -> None:
    apply(
        bed,
        real_ns,
        [
            claim_template("whole", whole_gpu()),
            probe_pod(
                "whole",
                node=real_node.name,
                templates={"gpu": "whole"},
                containers=[ProbeContainer("cuda", ("fill",), claims=("gpu",))],
            ),
        ],
    )
    pod = running(real_node, real_ns, "whole")
    r = report(real_node, pod, "cuda")
    [result] = results(real_node, real_ns, pod, "gpu")
    index = gpu_index(result["device"])
    assert result["device"] == f"gpu-{index}"

    nodes = device_nodes(r)
    assert nodes[f"/dev/nvidia{index}"] == (195, index)
    assert nodes["/dev/nvidiactl"] == (195, 255)
    assert "/dev/nvidia-uvm" in nodes
    assert f"/dev/nvidia{1 - index}" not in nodes
    # the driver from the driver root, read-only, found by the loader with no help from the image
    assert mounts(r)[CONTAINER_LIBCUDA].startswith("ro,")
    assert mounts(r)[CONTAINER_NVIDIA_SMI].startswith("ro,")
    assert CONTAINER_LIBCUDA in r["libraries"]
    assert "LD_LIBRARY_PATH" not in r["env"]
    assert r["env"]["NVIDIA_VISIBLE_DEVICES"] == "void"  # the toolkit, were it the runtime, adds nothing
    # nothing of the vgpu family: no preload, no claim directory, no limits
    assert not any("libtessera" in lib for lib in r["libraries"])
    assert "LD_PRELOAD" not in r["env"] and not r["claimDirs"]
    assert not any(k.startswith(("TESSERA_", "CUDA_DEVICE_")) for k in r["env"])
    assert r["cuInit"] == 0 and r["gpus"]
    for gpu in r["gpus"]:  # the fake GPU's own 80 GiB, all of it allocatable but the context
        assert not gpu["limited"] and gpu["total"] == 81920 << 20
        assert gpu["allocated"] == gpu["freeBefore"] > 80000 << 20
