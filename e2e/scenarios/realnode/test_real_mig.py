"""A MIG instance on the real node: created when the kubelet prepares the claim, its caps device node and the
parent GPU's node in the container, its UUID in CUDA_VISIBLE_DEVICES and in the claim's status; destroyed when
the pod goes."""

from __future__ import annotations

import pytest

from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, mig, probe_pod

from .helpers import apply, claim_of, delete_pod, device_nodes, gpu_index, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_mig_instance(bed: SimCluster, real_node: RealNode, real_ns: str) -> None:
    apply(
        bed,
        real_ns,
        [
            claim_template("small", mig("1g.10gb")),
            probe_pod(
                "mig",
                node=real_node.name,
                templates={"mig": "small"},
                containers=[ProbeContainer("cuda", ("report",), claims=("mig",))],
            ),
        ],
    )
    pod = running(real_node, real_ns, "mig")
    r = report(real_node, pod, "cuda")
    [result] = results(real_node, real_ns, pod, "mig")
    parent = gpu_index(result["device"])
    assert result["device"].startswith(f"gpu-{parent}-mig-1g10gb-")
    claim = claim_of(real_node, real_ns, pod, "mig")
    [status] = claim["status"]["devices"]
    mig_uuid = status["data"]["migUUID"]

    # the instance the plugin created is the one the container was given
    assert [m for _gpu, m in real_node.mig_instances()] == [mig_uuid]
    assert r["env"]["CUDA_VISIBLE_DEVICES"] == mig_uuid
    nodes = device_nodes(r)
    assert nodes[f"/dev/nvidia{parent}"] == (195, parent)
    # the GPU instance's and the compute instance's capability nodes, and no other
    gi, ci = real_node.mig_cap_minors()[mig_uuid]
    caps = {p: n for p, n in nodes.items() if p.startswith("/dev/nvidia-caps/")}
    assert set(caps) == {f"/dev/nvidia-caps/nvidia-cap{gi}", f"/dev/nvidia-caps/nvidia-cap{ci}"}
    assert {n[1] for n in caps.values()} == {gi, ci}
    assert f"/dev/nvidia{1 - parent}" not in nodes

    delete_pod(real_node, real_ns, "mig")
    assert real_node.mig_instances() == []
