"""The plugin crashes (SIGKILL) in its DaemonSet container while pods run on the real node: the running pod
keeps running; a pod created meanwhile waits (the kubelet cannot prepare its claim: the driver does not
answer) and runs once the kubelet has restarted the plugin's container (same pod, same socket names, stale
sockets cleared); the running pod's CDI spec and claim directory come through untouched and unprepare cleanly
later."""

from __future__ import annotations

import pytest

from e2e.harness.kube import get_pod, is_running, wait_for
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, probe_pod, vgpu

from .helpers import apply, claim_of, events, limited_gpu, report, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_plugin_killed_and_restarted_while_pods_run(
    bed: SimCluster, real_node: RealNode, real_ns: str
) -> None:
    apply(bed, real_ns, [claim_template("slice", vgpu("1500Mi", "20"))])
    apply(
        bed,
        real_ns,
        [
            probe_pod(
                "before",
                node=real_node.name,
                templates={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("hold", "700"), claims=("gpu",))],
            )
        ],
    )
    before = running(real_node, real_ns, "before")
    report(real_node, before, "cuda")
    uid = claim_of(real_node, real_ns, before, "gpu")["metadata"]["uid"]
    [spec] = real_node.cdi_specs()
    spec_bytes = spec.read_bytes()
    [claim_dir] = real_node.claim_dirs()
    region = (claim_dir / "shared" / "region").read_bytes()
    container_id = before["status"]["containerStatuses"][0]["containerID"]

    plugin = real_node.chart.current
    real_node.chart.kill(plugin)
    apply(
        bed,
        real_ns,
        [
            probe_pod(
                "during",
                node=real_node.name,
                templates={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("fill",), claims=("gpu",))],
            )
        ],
    )
    # the kubelet tries, fails, and keeps the pod waiting
    wait_for(
        "the kubelet to fail preparing the new pod's claim",
        lambda: any("FailedPrepareDynamicResources" in e for e in events(real_node, real_ns, "during")),
        timeout_s=60,
    )
    assert not is_running(get_pod(real_node.api, real_ns, "during"))
    assert is_running(get_pod(real_node.api, real_ns, "before"))

    # the kubelet restarts the container; Ready again once registered and published
    wait_for(
        "the plugin's container to be restarted and Ready",
        lambda: any(
            p.uid == plugin.uid and p.ready and p.restarts > plugin.restarts for p in real_node.chart.pods()
        ),
        timeout_s=120,
    )
    during = running(real_node, real_ns, "during", timeout_s=120)
    assert limited_gpu(report(real_node, during, "cuda"))["total"] == 1500 << 20

    before_now = get_pod(real_node.api, real_ns, "before")
    assert before_now is not None and is_running(before_now)
    status = before_now["status"]["containerStatuses"][0]
    assert status["containerID"] == container_id and status["restartCount"] == 0
    assert spec.read_bytes() == spec_bytes
    assert (claim_dir / "shared" / "region").exists()
    assert len((claim_dir / "shared" / "region").read_bytes()) == len(region)
    assert uid in real_node.plugin_prepared() and uid in real_node.kubelet_prepared()
