"""Volcano's preemption of a GPU pod (issue #31, "Gangs and queues"): every GPU of the node held by pods of
a low PriorityClass, a pod of a high one asks for a whole GPU. Volcano main's `preempt` action evicts nothing
for a DRA claim (docs/volcano.md, "Preemption"); once a low pod is deleted, as an eviction would, its claim's
device is freed on the node (its CDI spec and claim directory gone) and the high pod gets that GPU."""

from __future__ import annotations

from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from e2e.harness.kube import Json, get_claim, get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, results, running
from e2e.volcano.config import preempt_conf, scheduler_conf
from e2e.volcano.gangs import gang_waits
from e2e.volcano.launcher import Volcano
from e2e.volcano.workloads import claim_template, pod_with_template, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(300)]

GPUS = 8
LOW, HIGH = "vc-low", "vc-high"


@pytest.fixture(scope="module")
def preempting(vbed: SimCluster, volcano: Volcano) -> Iterator[Volcano]:
    scheduling = k8s.SchedulingV1Api(vbed.api)
    for name, value in ((LOW, 10), (HIGH, 1000)):
        body = k8s.V1PriorityClass(metadata=k8s.V1ObjectMeta(name=name), value=value)
        scheduling.create_priority_class(body)
    volcano.use_conf(preempt_conf())
    try:
        yield volcano
    finally:
        volcano.use_conf(scheduler_conf())
        for name in (LOW, HIGH):
            scheduling.delete_priority_class(name)


def prioritized(pod: Json, priority_class: str) -> Json:
    pod["spec"]["priorityClassName"] = priority_class
    return pod


def test_volcano_does_not_preempt_for_a_dra_claim_and_a_deleted_pod_frees_its_gpu(
    vbed: SimCluster, vns: str, preempting: Volcano
) -> None:
    low = [f"low-{i}" for i in range(GPUS)]
    apply(vbed, vns, [claim_template("whole", "gpu.tessera.dev")])
    apply(vbed, vns, [prioritized(volcano_pod(pod_with_template(n, "whole"), name=n), LOW) for n in low])
    held: dict[str, tuple[str, str]] = {}  # pod → (device, claim UID)
    for name in low:
        pod = running(vbed, vns, name, timeout_s=120)
        (r,) = results(vbed, vns, pod, "gpu")
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = get_claim(vbed.api, vns, status["resourceClaimName"]) or {}
        held[name] = (r["device"], str(claim["metadata"]["uid"]))
    node = vbed.node(H100)
    assert all(any(uid in p.name for p in node.cdi_specs()) for _, uid in held.values())

    apply(vbed, vns, [prioritized(volcano_pod(pod_with_template("high", "whole"), name="high"), HIGH)])
    # The upstream limit (docs/volcano.md, "Preemption"): the DRA filter's "cannot allocate all claims" is
    # UnschedulableAndUnresolvable, so the preempt action considers no node and evicts nothing. This part
    # fails once Volcano preempts for DRA claims.
    gang_waits(vbed, vns, ["high"], seconds=15)
    assert all(get_pod(vbed.api, vns, n) is not None for n in low), "a low pod was evicted"

    # What an eviction does, done by hand: the pod deleted, its claim's device is freed on the node and the
    # waiting pod gets that GPU.
    victim = low[3]
    device, uid = held[victim]
    vbed.kubectl.run("delete", "pod", victim, f"--namespace={vns}", "--wait=true")
    high = running(vbed, vns, "high", timeout_s=90)
    (r,) = results(vbed, vns, high, "gpu")
    assert r["device"] == device, "the high pod got the GPU the deleted pod held"
    wait_for("the deleted pod's claim unprepared on the node", lambda: not any(
        uid in p.name for p in [*node.cdi_specs(), *node.claim_dirs()]), timeout_s=30)  # fmt: skip
