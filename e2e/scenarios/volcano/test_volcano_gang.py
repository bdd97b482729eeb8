"""A gang of vgpu workers (issue #31, "Gangs and queues"): a PodGroup of 4 pods, each with a vgpu claim from
one ResourceClaimTemplate, each claim too large to share a GPU with another. With room for 3 none is bound
and no claim is allocated; once a fourth GPU frees, all 4 are bound in one go and run."""

from __future__ import annotations

import time

import pytest

from dra_driver.vocabulary.names import Cap
from e2e.harness.kube import get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, results, running
from e2e.volcano.gangs import claim_result, gang_waits
from e2e.volcano.workloads import claim_template, pod_with_template, podgroup, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(300)]

WORKERS = 4
GPUS = 8
# More than half of an 80 GB GPU: one such claim per GPU.
WORKER_SLICE = {Cap.MEMORY: "60Gi", Cap.CORES: "50"}


def test_a_gang_of_vgpu_workers_starts_all_together_or_not_at_all(vbed: SimCluster, vns: str) -> None:
    apply(vbed, vns, [claim_template("whole", "gpu.tessera.dev")])
    held = GPUS - (WORKERS - 1)
    apply(vbed, vns, [pod_with_template(f"held-{i}", "whole", node=H100) for i in range(held)])
    for i in range(held):
        running(vbed, vns, f"held-{i}")

    names = [f"worker-{i}" for i in range(WORKERS)]
    apply(
        vbed,
        vns,
        [
            claim_template("worker-slice", "vgpu.tessera.dev", capacity=WORKER_SLICE),
            podgroup("workers", min_member=WORKERS),
            *[volcano_pod(pod_with_template(n, "worker-slice"), name=n, group="workers") for n in names],
        ],
    )
    # Room for 3: none bound, no claim of the gang allocated.
    gang_waits(vbed, vns, names, seconds=15)

    freed = time.monotonic()
    vbed.kubectl.run("delete", "pod", "held-0", f"--namespace={vns}", "--wait=true")
    bound_at: dict[str, float] = {}

    def all_bound() -> bool:
        for name in names:
            pod = get_pod(vbed.api, vns, name) or {}
            if name not in bound_at and pod.get("spec", {}).get("nodeName"):
                bound_at[name] = time.monotonic()
        return len(bound_at) == WORKERS

    wait_for("the gang to be bound", all_bound, timeout_s=120, interval_s=0.05)
    spread = max(bound_at.values()) - min(bound_at.values())
    after = min(bound_at.values()) - freed
    print(f"gang of {WORKERS}: bound {after:.1f}s after the GPU freed, all within {spread:.2f}s")
    devices = {results(vbed, vns, running(vbed, vns, n, timeout_s=120), "gpu")[0]["device"] for n in names}
    assert len(devices) == WORKERS and all(d.endswith("-vgpu") for d in devices), devices
    for name in names:
        result = claim_result(vbed, vns, get_pod(vbed.api, vns, name) or {})
        assert result is not None and result["consumedCapacity"][Cap.MEMORY] == "60Gi"
