"""A Volcano Job (`batch.volcano.sh/v1alpha1`) whose task's pod template holds a claim from a
ResourceClaimTemplate: upstream volcano-sh/volcano#5119 reports its pods refused by the kubelet ("is not
allowed to use ResourceClaim": the claim is not reserved for the pod). Tried here on Volcano main at ed72c7c:
vc-controller-manager makes the task's pods, the resourceclaim controller their claims, and vc-scheduler
allocates them, reserves each for its pod and binds the pods, which run."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from dra_driver.vocabulary.names import Cap
from e2e.harness.kube import Json, get_claim, list_pods, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import apply, consumed, results
from e2e.scenarios.volcano.test_volcano_placement import placed_by_volcano
from e2e.volcano.config import SCHEDULER_NAME
from e2e.volcano.workloads import claim_template, pod_with_template

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(240)]

WORKERS = 2
SLICE = {Cap.MEMORY: "4Gi", Cap.CORES: "10"}


def volcano_job(name: str, *, template: str, replicas: int) -> Json:
    """A vcjob of one task; every field the Volcano admission webhook would default is written out (the test
    cluster runs no vc-webhook-manager)."""
    pod = pod_with_template("worker", template)
    return {
        "apiVersion": "batch.volcano.sh/v1alpha1",
        "kind": "Job",
        "metadata": {"name": name},
        "spec": {
            "schedulerName": SCHEDULER_NAME,
            "queue": "default",
            "minAvailable": replicas,
            "tasks": [
                {
                    "name": "worker",
                    "replicas": replicas,
                    "template": {"metadata": {}, "spec": pod["spec"]},
                }
            ],
        },
    }


@pytest.fixture
def jobs_deleted(vbed: SimCluster, vns: str) -> Iterator[None]:
    """The vcjobs go first: their controller would make again the pods the namespace's cleanup deletes."""
    yield
    vbed.kubectl.run("delete", "jobs.batch.volcano.sh", "--all", f"--namespace={vns}", "--wait=true")


def test_a_volcano_jobs_pods_get_their_template_claims_and_run(
    vbed: SimCluster, vns: str, jobs_deleted: None
) -> None:
    apply(
        vbed,
        vns,
        [claim_template("slice", "vgpu.tessera.dev", capacity=SLICE), volcano_job("train", template="slice",
                                                                                   replicas=WORKERS)],
    )  # fmt: skip

    def pods() -> list[str]:
        return [p["metadata"]["name"] for p in list_pods(vbed.api, vns)]

    names = wait_for(f"the job's {WORKERS} pods", lambda: len(pods()) == WORKERS and pods(), timeout_s=60)
    for name in names:
        pod = placed_by_volcano(vbed, vns, name)
        (r,) = results(vbed, vns, pod, "gpu")
        assert consumed(r, Cap.MEMORY) == "4Gi"
        (status,) = pod["status"]["resourceClaimStatuses"]
        claim = get_claim(vbed.api, vns, status["resourceClaimName"]) or {}
        reserved = {ref["uid"] for ref in claim["status"].get("reservedFor") or []}
        assert reserved == {pod["metadata"]["uid"]}, "the claim is reserved for the pod that uses it"
