"""Two Volcano queues share the GPUs (issue #31, "Gangs and queues"): Volcano's `capacity` plugin in place of
`proportion`, with its DRA queue quota (Volcano 1.15+): a queue's `capability` names DRA devices by
DeviceClass (`deviceclass/<class>`) and their consumed capacity (`memory.deviceclass/<class>`). A queue never
holds more than that; what it cannot take stays unbound, its claim unallocated, until its own pods free it."""

from __future__ import annotations

import time
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from dra_driver.vocabulary.names import Cap
from e2e.harness.kube import get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import apply, results
from e2e.volcano.config import capacity_conf, scheduler_conf
from e2e.volcano.gangs import bound, stays_unbound
from e2e.volcano.launcher import Volcano
from e2e.volcano.workloads import claim_template, pod_with_template, queue, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(300)]

WHOLE_QUEUE, SLICE_QUEUE = "vc-whole", "vc-slices"
SLICE = {Cap.MEMORY: "4Gi", Cap.CORES: "10"}
# Every capacity a claim requests must be named, cores too: Volcano refuses a dimension it has no capability
# for (docs/volcano.md, "Queues").
SLICE_CAPABILITY = {"memory.deviceclass/vgpu.tessera.dev": "8Gi", "cores.deviceclass/vgpu.tessera.dev": "100"}


@pytest.fixture(scope="module")
def capacity_plugin(volcano: Volcano) -> Iterator[Volcano]:
    volcano.use_conf(capacity_conf())
    try:
        yield volcano
    finally:
        volcano.use_conf(scheduler_conf())


@pytest.fixture
def queues(vbed: SimCluster, capacity_plugin: Volcano, vns: str) -> Iterator[None]:
    """One queue that may hold 1 whole GPU (weight 1), one that may hold 8 GiB of vgpu memory (weight 2)."""
    apply(
        vbed,
        vns,
        [
            queue(WHOLE_QUEUE, weight=1, capability={"deviceclass/gpu.tessera.dev": "1"}),
            queue(SLICE_QUEUE, weight=2, capability=SLICE_CAPABILITY),
        ],
    )
    try:
        yield
    finally:
        api = k8s.CustomObjectsApi(vbed.api)
        for name in (WHOLE_QUEUE, SLICE_QUEUE):
            api.delete_cluster_custom_object("scheduling.volcano.sh", "v1beta1", "queues", name)


def test_each_queue_holds_no_more_devices_than_its_capability(
    vbed: SimCluster, vns: str, queues: None
) -> None:
    whole = [f"whole-{i}" for i in range(2)]
    slices = [f"slice-{i}" for i in range(3)]
    apply(
        vbed,
        vns,
        [
            claim_template("whole", "gpu.tessera.dev"),
            claim_template("slice", "vgpu.tessera.dev", capacity=SLICE),
            *[volcano_pod(pod_with_template(n, "whole"), name=n, queue=WHOLE_QUEUE) for n in whole],
            *[volcano_pod(pod_with_template(n, "slice"), name=n, queue=SLICE_QUEUE) for n in slices],
        ],
    )
    started = time.monotonic()
    wait_for("one whole GPU and two slices bound", lambda: (
        len(bound(vbed, vns, whole)) == 1 and len(bound(vbed, vns, slices)) == 2), timeout_s=90)  # fmt: skip
    print(f"queues: 1 whole GPU and 2 slices of 4Gi placed in {time.monotonic() - started:.1f}s")
    waiting = [n for n in whole + slices if n not in bound(vbed, vns, whole + slices)]
    assert len(waiting) == 2
    # Six GPUs stay free: only the queues' capabilities hold the other two back.
    stays_unbound(vbed, vns, waiting, seconds=10)
    placed = bound(vbed, vns, slices)
    for name in placed:
        (r,) = results(vbed, vns, get_pod(vbed.api, vns, name) or {}, "gpu")
        assert r["consumedCapacity"][Cap.MEMORY] == "4Gi"

    # A pod of the whole-GPU queue ends: its quota frees, and the queue's other pod takes it.
    (first,) = bound(vbed, vns, whole)
    vbed.kubectl.run("delete", "pod", first, f"--namespace={vns}", "--wait=true")
    (second,) = [n for n in whole if n != first]
    wait_for(f"{second} bound once {first} freed its queue's GPU", lambda: bound(vbed, vns, [second]),
             timeout_s=60)  # fmt: skip
    assert len(bound(vbed, vns, slices)) == 2, "the slice queue is still at its capability"
