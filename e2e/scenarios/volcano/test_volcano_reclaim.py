"""Volcano's reclaim between queues (issue #31, "Gangs and queues"): queue `vc-over` holds the node, over its
deserved share once a pod of queue `vc-under` (equal weight, under its share) waits. With the `reclaim`
action (`reclaim_conf`: the DRA guide's configuration, `proportion` included) Volcano main evicts one of
vc-over's pods for a pod that asks for CPU alone, and evicts nothing for the same pod with a whole-GPU claim:
reclaim drops every node whose DRA filter says "cannot allocate all claims" before it looks for victims
(docs/volcano.md, "Reclaim"). The second test fails once Volcano reclaims for DRA claims."""

from __future__ import annotations

import copy
import re
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dra_driver.vocabulary.names import DRIVER_NAME, Attr
from e2e.harness.kube import Json, get_pod
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, claim_of, results, running
from e2e.volcano.config import reclaim_conf, scheduler_conf
from e2e.volcano.gangs import gang_waits
from e2e.volcano.launcher import Volcano
from e2e.volcano.workloads import claim_template, pod_with_template, queue, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(300)]

OVER, UNDER = "vc-over", "vc-under"
# Half the simulated node's 64 CPUs: two pods of vc-over fill it, so `proportion` (which counts CPU and
# memory, no DRA device) sees vc-over over its share (32 of 64 CPUs) once vc-under asks for 32.
HALF_NODE_CPU = "32"
# Two of the node's eight GPUs: two pods hold every GPU these claims may take.
FIRST_TWO_GPUS = f'device.attributes["{DRIVER_NAME}"].{Attr.INDEX} < 2'


@pytest.fixture(scope="module")
def reclaiming(volcano: Volcano) -> Iterator[Volcano]:
    volcano.use_conf(reclaim_conf())
    try:
        yield volcano
    finally:
        volcano.use_conf(scheduler_conf())


@pytest.fixture
def queues(vbed: SimCluster, reclaiming: Volcano, vns: str) -> Iterator[None]:
    # The shares are of the cluster's CPUs: the node's 64 must be all of them.
    nodes = [n.metadata.name for n in k8s.CoreV1Api(vbed.api).list_node().items if n.metadata]
    assert nodes == [H100], f"the scenario needs {H100} alone, the cluster has {nodes}"
    apply(vbed, vns, [queue(OVER, weight=1), queue(UNDER, weight=1)])
    try:
        yield
    finally:
        api = k8s.CustomObjectsApi(vbed.api)
        for name in (OVER, UNDER):
            api.delete_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)


def half_node(pod: Json) -> Json:
    """`pod` asking for half the node's CPUs."""
    out = copy.deepcopy(pod)
    out["spec"]["containers"][0]["resources"]["requests"]["cpu"] = HALF_NODE_CPU
    return out


def cpu_only(pod: Json) -> Json:
    """`pod` without its claim."""
    out = copy.deepcopy(pod)
    del out["spec"]["resourceClaims"]
    del out["spec"]["containers"][0]["resources"]["claims"]
    return out


def present(bed: SimCluster, ns: str, name: str) -> bool:
    """The pod exists and is not being deleted (an eviction deletes it)."""
    pod = get_pod(bed.api, ns, name)
    return pod is not None and not pod["metadata"].get("deletionTimestamp")


def log_since(volcano: Volcano, offset: int) -> str:
    with volcano.scheduler_log.open("rb") as f:
        f.seek(offset)
        return f.read().decode("utf-8", errors="replace")


def log_offset(volcano: Volcano) -> int:
    return volcano.scheduler_log.stat().st_size


def test_volcano_reclaims_cpu_from_a_queue_over_its_share(
    vbed: SimCluster, vns: str, queues: None, reclaiming: Volcano
) -> None:
    """The control: the same queues and pods without claims. One of vc-over's pods is evicted and vc-under's
    pod runs in its place."""
    over = ["over-0", "over-1"]
    base = half_node(cpu_only(pod_with_template("base", "unused", node=H100)))
    apply(vbed, vns, [volcano_pod(base, name=n, queue=OVER) for n in over])
    for name in over:
        running(vbed, vns, name, timeout_s=90)
    offset = log_offset(reclaiming)

    apply(vbed, vns, [volcano_pod(base, name="under", queue=UNDER)])
    running(vbed, vns, "under", timeout_s=90)
    left = [n for n in over if present(vbed, vns, n)]
    assert len(left) == 1, f"vc-over's pods left: {left}"
    (victim,) = set(over) - set(left)
    assert f"Evicting pod {vns}/{victim}, because of reclaim" in log_since(reclaiming, offset)


def test_volcano_does_not_reclaim_for_a_gpu_claim(
    vbed: SimCluster, vns: str, queues: None, reclaiming: Volcano
) -> None:
    """vc-over's two pods hold GPUs 0 and 1 and the node's CPUs; vc-under's pod asks for one of those GPUs.
    Reclaim considers it (the log says so) but no node: nothing is evicted, the pod stays unbound with its
    claim unallocated. The upstream limit, docs/volcano.md ("Reclaim"): this test fails once Volcano
    reclaims for DRA claims."""
    over = ["over-0", "over-1"]
    apply(vbed, vns, [claim_template("first-two", "gpu.tessera.dev", cel=FIRST_TWO_GPUS)])
    base = half_node(pod_with_template("base", "first-two", node=H100))
    apply(vbed, vns, [volcano_pod(base, name=n, queue=OVER) for n in over])
    held: dict[str, str] = {}  # device → its claim's UID
    for name in over:
        pod = running(vbed, vns, name, timeout_s=90)
        (r,) = results(vbed, vns, pod, "gpu")
        held[r["device"]] = str(claim_of(vbed, vns, pod, "gpu")["metadata"]["uid"])
    assert set(held) == {"gpu-0", "gpu-1"}
    node = vbed.node(H100)

    def prepared() -> bool:
        return all(any(uid in p.name for p in node.cdi_specs()) for uid in held.values())

    assert prepared()
    offset = log_offset(reclaiming)

    apply(vbed, vns, [volcano_pod(base, name="under", queue=UNDER)])
    gang_waits(vbed, vns, ["under"], seconds=10)
    assert all(present(vbed, vns, n) for n in over), "a pod of vc-over was evicted"
    assert prepared(), "a claim of vc-over was unprepared"
    log = log_since(reclaiming, offset)
    # Reclaim took the pod up (its queue may reclaim, the victims' queue is reclaimable) ...
    assert re.search(rf"Considering reclaim for 1 tasks of job <{vns}/", log), "reclaim never ran for it"
    # ... and dropped the node before looking for victims: the DRA filter's UnschedulableAndUnresolvable.
    assert f"Considering Task <{vns}/under> on Node <" not in log
    assert "cannot allocate all claims" in log
