"""AdmissionReviews in, answers out: the patch makes the converted Pod; refusals name the field."""

import base64
import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.convert import names
from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.convert.pod import MAX_GPU_CONTAINERS, Template, convert_pod_parts
from admission.review import admit, claim_match_expression, match_expression

REPO = Path(__file__).resolve().parents[3]
OPTIONS = Options(known_products(), replace_schedulers=("volcano",))


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parents:
            target = target[p]
        if op["op"] == "remove":
            del target[last]
        else:
            assert op["op"] in ("add", "replace") and (op["op"] == "add") == (last not in target)
            target[last] = op["value"]
    return out


def review(pod: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": operation,
            "namespace": "team-a",
            "object": pod,
        },
    }


class Lookups:
    """A read-only view of the cluster's templates (what the webhook's watch keeps): it records what was
    asked and answers from `found`."""

    def __init__(self, found: dict[tuple[str, str], dict[str, Any]] | None = None) -> None:
        self.asked: list[tuple[str, str]] = []
        self.found = found or {}

    def __call__(self, namespace: str, name: str) -> dict[str, Any] | None:
        self.asked.append((namespace, name))
        return self.found.get((namespace, name))


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "admission" / "examples" / name).read_text())
    return doc


def converted(pod: dict[str, Any]) -> dict[str, Any]:
    """The Pod as the patch must leave it: the conversion, and the label the reconciler watches."""
    expected = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS)
    metadata = copy.deepcopy(expected.metadata)
    metadata["labels"] = {**metadata.get("labels", {}), names.CONVERTED_LABEL[0]: names.CONVERTED_LABEL[1]}
    return {**pod, "metadata": metadata, "spec": expected.spec}


@pytest.mark.parametrize("name", ["hami-default-use.yaml", "volcano-vgpu.yaml", "hami-dynamic-mig.yaml"])
def test_the_patch_makes_the_converted_and_labelled_pod_and_only_reads(name: str) -> None:
    pod, stored = example(name), Lookups()
    answer = admit(review(pod), OPTIONS, stored)["response"]
    assert answer["uid"] == "u-1" and answer["allowed"] and answer["patchType"] == "JSONPatch"
    assert apply_patch(pod, json.loads(base64.b64decode(answer["patch"]))) == converted(pod)
    templates = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS).templates
    assert stored.asked == [("team-a", t.name) for t in templates]


def test_a_pod_with_labels_keeps_them_and_gets_the_label() -> None:
    pod = example("hami-default-use.yaml")
    pod["metadata"]["labels"] = {"app": "train", "a/b": "c"}
    answer = admit(review(pod), OPTIONS)["response"]
    patched = apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    assert patched["metadata"]["labels"] == {"app": "train", "a/b": "c", names.CONVERTED_LABEL[0]: "true"}
    assert patched == converted(pod)


def test_notes_are_warnings() -> None:
    answer = admit(review(example("hami-dynamic-mig.yaml")), OPTIONS)["response"]
    assert any(names.GPU_SCHEDULER_POLICY in w for w in answer["warnings"])


def test_refusal_names_the_field() -> None:
    pod = example("hami-default-use.yaml")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = 101
    answer = admit(review(pod), OPTIONS)["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400
    assert answer["status"]["message"].startswith(
        "spec.containers[0].resources.limits[nvidia.com/gpucores]: 101"
    )


def _stored(template: Template, *, labels: dict[str, str] | None = None) -> dict[str, Any]:
    """`template` as the API server returns it: quantities canonical (3000Mi stays, 1024Mi is 1Gi) and the
    empty metadata it writes out."""
    manifest = template.manifest("team-a", made_by_webhook=True)
    text = json.dumps(manifest).replace('"1024Mi"', '"1Gi"')
    stored: dict[str, Any] = json.loads(text)
    stored["spec"]["metadata"] = {"creationTimestamp": None}
    stored["metadata"]["uid"] = "t-1"
    if labels is not None:
        stored["metadata"]["labels"] = labels
    return stored


@pytest.mark.parametrize("name", ["hami-default-use.yaml", "volcano-vgpu.yaml"])
def test_the_conversions_own_template_is_taken(name: str) -> None:
    pod = example(name)
    (template,) = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS).templates
    answer = admit(review(pod), OPTIONS, Lookups({("team-a", template.name): _stored(template)}))
    assert answer["response"]["allowed"]


@pytest.mark.parametrize(
    ("change", "why"),
    [
        (lambda t: t["spec"]["spec"]["devices"]["requests"][0]["exactly"].update(count=1), "its spec"),
        (lambda t: t["spec"]["spec"]["devices"].update(config=[{"requests": ["gpu"]}]), "its spec"),
        (lambda t: t["metadata"].update(labels={"app": "mine"}), "lacks the label"),
    ],
    ids=["other-count", "added-config", "no-label"],
)
def test_a_squatted_template_refuses_the_pod_naming_it_and_the_fix(change: Any, why: str) -> None:
    pod = example("hami-default-use.yaml")
    (template,) = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS).templates
    squatter = _stored(template)
    change(squatter)
    answer = admit(review(pod), OPTIONS, Lookups({("team-a", template.name): squatter}))["response"]
    message = answer["status"]["message"]
    assert not answer["allowed"] and answer["status"]["code"] == 409
    assert f"ResourceClaimTemplate {template.name} in namespace team-a exists" in message
    assert why in message and "Delete or rename that template" in message


def test_more_than_64_gpu_containers_are_refused_naming_the_field() -> None:
    pod = example("hami-default-use.yaml")
    gpu = pod["spec"]["containers"][0]
    pod["spec"]["containers"] = [
        {**copy.deepcopy(gpu), "name": f"c{i}"} for i in range(MAX_GPU_CONTAINERS + 1)
    ]
    answer = admit(review(pod), OPTIONS)["response"]
    assert not answer["allowed"]
    assert answer["status"]["message"].startswith(f"spec.containers[{MAX_GPU_CONTAINERS}]: more than 64")
    pod["spec"]["containers"].pop()
    assert admit(review(pod), OPTIONS)["response"]["allowed"]


@pytest.mark.parametrize(
    ("request_fields", "field"),
    [
        ({"object": "a pod"}, "request.object"),
        ({"object": {"metadata": "m", "spec": {}}}, "request.object"),
        ({"object": {"metadata": {}, "spec": ["s"]}}, "request.object"),
        ({"namespace": ["x"]}, "request.namespace"),
    ],
)
def test_a_malformed_pod_is_denied_naming_the_field(request_fields: dict[str, Any], field: str) -> None:
    forged = review(example("hami-default-use.yaml"))
    forged["request"].update(request_fields)
    answer = admit(forged, OPTIONS)["response"]
    assert not answer["allowed"] and answer["status"]["message"].startswith(field)


def test_other_requests_and_plain_pods_pass_unchanged() -> None:
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    for r in (review(plain), review(example("hami-default-use.yaml"), operation="UPDATE")):
        assert admit(r, OPTIONS)["response"] == {"uid": "u-1", "allowed": True}


def test_the_charts_match_condition_is_the_generated_one() -> None:
    chart = (REPO / "deploy" / "helm" / "tessera" / "templates" / "admission-webhook.yaml").read_text()
    assert match_expression(names.all_resource_names()) in chart


NVIDIA = REPO / "admission" / "examples" / "nvidia"


def claim_review(obj: dict[str, Any], *, operation: str = "CREATE") -> dict[str, Any]:
    r = review(obj, operation=operation)
    r["request"]["kind"] = {"group": "resource.k8s.io", "version": "v1", "kind": obj["kind"]}
    return r


def nvidia_claim(name: str, kind: str) -> dict[str, Any]:
    found: dict[str, Any] = next(
        d for d in yaml.safe_load_all((NVIDIA / name).read_text()) if d["kind"] == kind
    )
    return found


@pytest.mark.parametrize(
    ("name", "kind", "classes"),
    [
        ("mps.yaml", "ResourceClaimTemplate", ["mps.tessera.dev"]),
        ("time-slicing.yaml", "ResourceClaim", ["gpu.tessera.dev"]),
        ("mig.yaml", "ResourceClaimTemplate", ["mig.tessera.dev", "mig.tessera.dev"]),
    ],
)
def test_an_nvidia_claim_is_converted_in_place_with_warnings(
    name: str, kind: str, classes: list[str]
) -> None:
    """Issue #36: the webhook takes claims written for NVIDIA's DRA driver too; its patch replaces the spec
    with the conversion's, and says what each request became."""
    obj = nvidia_claim(name, kind)
    answer = admit(claim_review(obj), OPTIONS)["response"]
    assert answer["allowed"] and answer["patchType"] == "JSONPatch"
    patched = apply_patch(obj, json.loads(base64.b64decode(answer["patch"])))
    spec = patched["spec"]["spec"] if kind == "ResourceClaimTemplate" else patched["spec"]
    assert [r["exactly"]["deviceClassName"] for r in spec["devices"]["requests"]] == classes
    assert patched["metadata"] == obj["metadata"]
    assert any("tessera.dev" in w for w in answer["warnings"])


def test_an_nvidia_claim_without_counterpart_is_denied_naming_the_field() -> None:
    obj = nvidia_claim("mps.yaml", "ResourceClaimTemplate")
    obj["spec"]["spec"]["devices"]["requests"][0]["exactly"]["deviceClassName"] = (
        "compute-domain-daemon.nvidia.com"
    )
    answer = admit(claim_review(obj), OPTIONS)["response"]
    assert not answer["allowed"]
    assert (
        "requests[0].exactly.deviceClassName: compute-domain-daemon.nvidia.com: ComputeDomains"
        in (answer["status"]["message"])
    )


def test_other_claims_and_updates_pass_unchanged() -> None:
    mine = nvidia_claim("mps.yaml", "ResourceClaimTemplate")
    mine["spec"]["spec"]["devices"] = {
        "requests": [{"name": "g", "exactly": {"deviceClassName": "gpu.tessera.dev"}}]
    }
    for r in (
        claim_review(mine),
        claim_review(nvidia_claim("mig.yaml", "ResourceClaimTemplate"), operation="UPDATE"),
    ):
        assert admit(r, OPTIONS)["response"] == {"uid": "u-1", "allowed": True}


def test_the_charts_claim_match_conditions_are_the_generated_ones() -> None:
    chart = (REPO / "deploy" / "helm" / "tessera" / "templates" / "admission-webhook.yaml").read_text()
    for kind in ("ResourceClaim", "ResourceClaimTemplate"):
        assert claim_match_expression(kind) in chart
