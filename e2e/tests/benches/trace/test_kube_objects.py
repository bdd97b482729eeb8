"""A trace pod as a Pod and a ResourceClaim: CPU and memory on the pod; a share as one vgpu alternative per
model it may use; whole GPUs as a count; gpu_spec as a selector on the product name."""

from __future__ import annotations

import pytest

from e2e.benches.trace.gpu_models import model
from e2e.benches.trace.kube_objects import claim_object, claim_request, pod_object
from e2e.benches.trace.records import TraceError, TracePod

MODELS = [model("G2"), model("T4"), model("V100M16")]
PRODUCT = 'device.attributes["gpu.tessera.dev"].productName'


def test_a_share_offers_one_alternative_per_model_with_that_models_memory() -> None:
    request = claim_request(TracePod("p", 6000, 12288, 1, 460), MODELS)
    alternatives = request["firstAvailable"]
    assert [a["name"] for a in alternatives] == ["g2", "t4", "v100m16"]
    t4 = alternatives[1]
    assert t4["deviceClassName"] == "vgpu.tessera.dev"
    assert t4["selectors"] == [{"cel": {"expression": f'{PRODUCT} == "Tesla T4"'}}]
    assert t4["capacity"] == {"requests": {"memory": "7065Mi", "cores": "46"}}
    assert alternatives[0]["capacity"]["requests"]["memory"] == f"{32768 * 460 // 1000}Mi"


def test_gpu_spec_narrows_a_share_to_its_models_and_whole_gpus_to_a_selector() -> None:
    share = claim_request(TracePod("p", 1, 1, 1, 300, ("T4",)), MODELS)
    assert "firstAvailable" not in share and share["exactly"]["capacity"]["requests"]["cores"] == "30"
    whole = claim_request(TracePod("p", 1, 1, 4, 1000, ("V100M16", "T4")), MODELS)["exactly"]
    assert whole["deviceClassName"] == "gpu.tessera.dev"
    assert (whole["allocationMode"], whole["count"]) == ("ExactCount", 4)
    assert whole["selectors"] == [
        {"cel": {"expression": f'{PRODUCT} in ["Tesla T4", "Tesla V100-SXM2-16GB"]'}}
    ]
    assert "selectors" not in claim_request(TracePod("p", 1, 1, 2, 1000), MODELS)["exactly"]
    with pytest.raises(TraceError, match="gpu_spec names A10, which no node of the cluster has"):
        claim_request(TracePod("p", 1, 1, 1, 1000, ("A10",)), MODELS)


def test_the_pod_asks_for_its_cpu_memory_and_claim() -> None:
    trace_pod = TracePod("openb-pod-0001", 6000, 12288, 1, 460)
    body = pod_object(trace_pod, name="t00001", claim="t00001-gpu", node_selector={"k": "v"})
    spec = body["spec"]
    (container,) = spec["containers"]
    assert container["resources"] == {
        "requests": {"cpu": "6000m", "memory": "12288Mi"},
        "claims": [{"name": "gpu"}],
    }
    assert spec["resourceClaims"] == [{"name": "gpu", "resourceClaimName": "t00001-gpu"}]
    assert spec["nodeSelector"] == {"k": "v"}
    cpu_only = pod_object(TracePod("c", 8000, 1024, 0, 0), name="t2", claim=None, node_selector={})
    assert "resourceClaims" not in cpu_only["spec"]
    assert "claims" not in cpu_only["spec"]["containers"][0]["resources"]
    claim = claim_object(trace_pod, name="t00001-gpu", models=MODELS)
    assert (
        claim["metadata"] == {"name": "t00001-gpu"}
        and claim["spec"]["devices"]["requests"][0]["name"] == "gpu"
    )
    with pytest.raises(TraceError, match="asks for no GPU"):
        claim_request(TracePod("c", 1, 1, 0, 0), MODELS)
