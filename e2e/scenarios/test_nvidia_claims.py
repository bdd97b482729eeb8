"""Claims written for NVIDIA's DRA driver (admission/examples/nvidia: a whole GPU by product and memory, two
MIG devices of one GPU, a GPU time-sliced by two pods through one ResourceClaim, an MPS share) on Tessera,
placed by the real kube-scheduler as the conversion says (issue #36): once converted by `tessera convert`,
and once applied as written, converted by the admission webhook through the real API server (its
matchConditions evaluated there); a ComputeDomain claim is refused by the API server with the reason."""

from __future__ import annotations

import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.names import Attr, Cap
from e2e.harness.examples import pinned
from e2e.harness.kube import Json, allocated_results, get_claim
from e2e.harness.testbed import SimCluster
from e2e.harness.webhook import RunningWebhook, helm_binary, start_webhook
from e2e.scenarios.probes import H100, apply, attribute, consumed, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

REPO = Path(__file__).resolve().parents[2]
EXAMPLES = REPO / "admission" / "examples" / "nvidia"
WEBHOOK_NS = "tessera-nvidia-claims-e2e"


def files() -> list[str]:
    return sorted(str(p) for p in EXAMPLES.glob("*.yaml"))


def pinned_pods(docs: list[Json]) -> list[Json]:
    return [pinned(d, H100) if d["kind"] == "Pod" else d for d in docs]


def converted() -> list[Json]:
    """`tessera convert` over the NVIDIA examples, as a user runs it."""
    done = subprocess.run(
        [sys.executable, "-m", "kubelet_plugin.command", "convert", *files()],
        capture_output=True, text=True, cwd=REPO, check=False, timeout=120,
    )  # fmt: skip
    assert done.returncode == 0, done.stderr
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def as_written() -> list[Json]:
    return [d for f in files() for d in yaml.safe_load_all(Path(f).read_text()) if d]


def placed_as_converted(bed: SimCluster, ns: str, docs: list[Json]) -> None:
    """Applies `docs` (pods pinned to the H100 node); every pod runs on the devices its claim asked for."""
    assert {d["kind"] for d in docs} == {"ResourceClaimTemplate", "ResourceClaim", "Pod"}
    apply(bed, ns, pinned_pods(docs))
    names = [d["metadata"]["name"] for d in docs if d["kind"] == "Pod"]
    pods = {name: running(bed, ns, name) for name in names}

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
    devices = [whole["device"], gpu["device"], mps["device"], *migs.values()]
    assert len({d.split("-")[1] for d in devices}) == 4


def test_converted_nvidia_claims_are_placed_by_the_real_scheduler(bed: SimCluster, ns: str) -> None:
    placed_as_converted(bed, ns, converted())


@pytest.fixture
def webhook(bed: SimCluster, tmp_path: Path) -> Iterator[RunningWebhook]:
    if helm_binary() is None:
        pytest.skip("no helm: run deploy/helm/build-helm.sh")
    running_webhook = start_webhook(bed.api, bed.kubectl, bed.plane.kubeconfig, WEBHOOK_NS, tmp_path / "log")
    try:
        yield running_webhook
    finally:
        running_webhook.stop()


def test_the_webhook_converts_nvidia_claims_as_written(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    placed_as_converted(bed, ns, as_written())
    api: Any = k8s.ResourceV1Api(bed.api)  # the client's models are typed Optional all the way down
    stored = api.read_namespaced_resource_claim_template("mps-share", ns).spec.spec.devices
    assert stored.requests[0].exactly.device_class_name == "mps.tessera.dev"
    assert not stored.config  # NVIDIA's GpuConfig read and dropped

    domain = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "imex", "namespace": ns},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "ch",
                        "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                    }
                ]
            }
        },
    }
    with pytest.raises(ApiException) as refused:
        api.create_namespaced_resource_claim(ns, domain)
    assert "ComputeDomain IMEX channels have no counterpart" in str(refused.value.body)
