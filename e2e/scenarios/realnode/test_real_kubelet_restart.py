"""The kubelet restarts while pods with vgpu and MIG claims run on the real node: the containers keep running
(containerd holds them), the kubelet reloads its DRA checkpoint, the plugin is registered again through the
plugin watcher, the kubelet's checkpoint and Tessera's agree claim by claim, device by device, and new pods
run."""

from __future__ import annotations

import pytest

from e2e.harness.kube import get_pod, is_running, wait_for
from e2e.harness.node import driver_slices, pool_complete
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, mig, probe_pod, vgpu

from .helpers import apply, limited_gpu, report, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_kubelet_restart_keeps_pods_and_checkpoints_agree(
    bed: SimCluster, real_node: RealNode, real_ns: str
) -> None:
    apply(
        bed,
        real_ns,
        [
            claim_template("slice", vgpu("1200Mi", "10")),
            claim_template("small", mig("1g.10gb")),
            probe_pod(
                "vgpu",
                node=real_node.name,
                templates={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("hold", "100"), claims=("gpu",))],
            ),
            probe_pod(
                "mig",
                node=real_node.name,
                templates={"mig": "small"},
                containers=[ProbeContainer("cuda", ("report",), claims=("mig",))],
            ),
        ],
    )
    pods = {name: running(real_node, real_ns, name) for name in ("vgpu", "mig")}
    for pod in pods.values():
        report(real_node, pod, "cuda")
    containers = {n: p["status"]["containerStatuses"][0]["containerID"] for n, p in pods.items()}
    kubelet_before = real_node.kubelet_prepared()
    assert len(kubelet_before) == 2
    assert kubelet_before == real_node.plugin_prepared()
    plugin = real_node.chart.current
    registrations = plugin.registrations()

    real_node.restart_kubelet()

    # the plugin watcher found the plugin's socket again and the kubelet registered it anew
    wait_for(
        "the restarted kubelet to register the plugin",
        lambda: plugin.registrations() > registrations,
        timeout_s=60,
    )
    # the kubelet wipes the node's slices when it starts; the plugin publishes its pool again
    wait_for("the pool to be complete", lambda: pool_complete(driver_slices(real_node.api, real_node.name)))
    for name in pods:
        now = get_pod(real_node.api, real_ns, name)
        assert now is not None and is_running(now)
        status = now["status"]["containerStatuses"][0]
        assert status["containerID"] == containers[name] and status["restartCount"] == 0
    assert real_node.kubelet_prepared() == kubelet_before == real_node.plugin_prepared()
    assert len(real_node.mig_instances()) == 1

    # and the restarted kubelet prepares new claims
    apply(
        bed,
        real_ns,
        [
            probe_pod(
                "after",
                node=real_node.name,
                templates={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("fill",), claims=("gpu",))],
            )
        ],
    )
    after = running(real_node, real_ns, "after")
    assert limited_gpu(report(real_node, after, "cuda"))["total"] == 1200 << 20
    assert len(real_node.kubelet_prepared()) == 3
    assert real_node.kubelet_prepared() == real_node.plugin_prepared()
