"""Deleting a pod on the real node: the kubelet unprepares its claims before it finalizes the pod, so the
moment the pod is gone the CDI specs, the claim directory, the MIG instance and both checkpoints' entries are
gone, and the claims' status.devices are cleared."""

from __future__ import annotations

import pytest

from e2e.harness.kube import get_claim, pod_claim_name
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, mig, probe_pod, vgpu

from .helpers import apply, delete_pod, report, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_deletion_unprepares_everything(bed: SimCluster, real_node: RealNode, real_ns: str) -> None:
    apply(
        bed,
        real_ns,
        [
            claim_template("slice", vgpu("1000Mi", "10")),
            claim_template("small", mig("1g.10gb")),
            probe_pod(
                "both",
                node=real_node.name,
                templates={"slice": "slice", "mig": "small"},
                containers=[
                    ProbeContainer("vgpu", ("fill",), claims=("slice",)),
                    ProbeContainer("mig", ("report",), claims=("mig",)),
                ],
            ),
        ],
    )
    pod = running(real_node, real_ns, "both")
    report(real_node, pod, "vgpu")
    report(real_node, pod, "mig")
    names = [pod_claim_name(pod, entry) for entry in ("slice", "mig")]
    uids = {get_claim(real_node.api, real_ns, n)["metadata"]["uid"] for n in names}  # type: ignore[index]
    assert len(real_node.cdi_specs()) == 2
    assert [d.name for d in real_node.claim_dirs()] != []
    assert len(real_node.mig_instances()) == 1
    assert set(real_node.kubelet_prepared()) == uids == set(real_node.plugin_prepared())

    delete_pod(real_node, real_ns, "both")
    # no waiting: the kubelet finalizes a pod only after its claims are unprepared
    assert real_node.cdi_specs() == []
    assert real_node.claim_dirs() == []
    assert real_node.mig_instances() == []
    assert real_node.kubelet_prepared() == {} and real_node.plugin_prepared() == {}
    for n in names:
        claim = get_claim(real_node.api, real_ns, n)
        # a claim from a template goes with its pod; if it is still there, its device status is cleared
        assert claim is None or not (claim.get("status") or {}).get("devices")
