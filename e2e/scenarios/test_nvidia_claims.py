"""Claims written for NVIDIA's DRA driver (admission/examples/nvidia: a whole GPU by product and memory, two
MIG devices of one GPU, a GPU time-sliced by two pods through one ResourceClaim, an MPS share), converted by
`tessera convert` and applied unchanged otherwise: the real kube-scheduler places every one on Tessera's
devices as the conversion says (issue #36)."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_driver.vocabulary.names import Attr, Cap
from e2e.harness.examples import pinned
from e2e.harness.kube import Json, allocated_results, get_claim
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, attribute, consumed, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "admission" / "examples" / "nvidia"


def converted() -> list[Json]:
    """`tessera convert` over the NVIDIA examples, as a user runs it; the pods pinned to the H100 node."""
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    done = subprocess.run(
        [sys.executable, "-m", "kubelet_plugin.command", "convert", *files],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    docs = [d for d in yaml.safe_load_all(done.stdout) if d]
    return [pinned(d, H100) if d["kind"] == "Pod" else d for d in docs]


def test_converted_nvidia_claims_are_placed_by_the_real_scheduler(bed: SimCluster, ns: str) -> None:
    docs = converted()
    assert {d["kind"] for d in docs} == {"ResourceClaimTemplate", "ResourceClaim", "Pod"}
    apply(bed, ns, docs)
    pods = {
        d["metadata"]["name"]: running(bed, ns, d["metadata"]["name"]) for d in docs if d["kind"] == "Pod"
    }

    # a whole GPU, chosen by the rewritten CEL (an H100 of at least 70 Gi)
    [whole] = results(bed, ns, pods["trainer"], "gpu")
    assert whole["device"].count("-") == 1 and whole["driver"] == "gpu.tessera.dev"
    assert str(attribute(bed, H100, whole["device"], Attr.PRODUCT_NAME)).startswith("NVIDIA H100")

    # two MIG devices of the asked profiles on one GPU (the constraint on parentUUID, rewritten)
    migs = {r["request"]: r["device"] for r in results(bed, ns, pods["mig-pair"], "migs")}
    assert "-mig-1g10gb-" in migs["small"] and "-mig-3g40gb-" in migs["large"]
    parents = {attribute(bed, H100, d, Attr.PARENT_UUID) for d in migs.values()}
    assert len(parents) == 1

    # an MPS share with NVIDIA's thread percentage and pinned-memory limit as its capacity
    [mps] = results(bed, ns, pods["inference"], "gpu")
    assert mps["device"].endswith("-mps")
    assert (consumed(mps, Cap.CORES), consumed(mps, Cap.MEMORY)) == ("30", "8Gi")

    # one time-sliced GPU for two pods through one ResourceClaim: one whole GPU, reserved for both
    shared = get_claim(bed.api, ns, "shared-gpu")
    assert shared is not None
    [gpu] = allocated_results(shared)
    assert gpu["device"].count("-") == 1
    reserved = {r["name"] for r in shared["status"]["reservedFor"]}
    assert reserved == {"sliced-a", "sliced-b"}

    # every claim on its own GPU: the whole GPUs, the MIG parent and the MPS share never overlap
    indexes = [whole["device"], gpu["device"], mps["device"].removesuffix("-mps"), *migs.values()]
    gpus = {d.split("-")[1] for d in indexes}
    assert len(gpus) == 4
