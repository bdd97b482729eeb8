"""An AdmissionReview (admission.k8s.io/v1) in, its answer out: the conversion as a JSON patch.

Answering writes nothing (`sideEffects: None`): anyone who reaches the webhook's port can post a review, so
only what the API server really admits may change the cluster. A Pod being created is converted
(admission.convert) and labelled `admission.tessera.dev/converted`; the template reconciler
(admission/templates.py) makes its templates once the API server has admitted it. A template of a name the
conversion gives that exists with other content (`stored`, a watch's read-only view) refuses the Pod, naming
the template and the fix. A refused conversion is a denial whose message names the field and the fix; the
conversion's notes become warnings (`kubectl` prints them). A ResourceClaim or ResourceClaimTemplate written
for NVIDIA's DRA driver is converted in place (admission/convert/nvidia_claims.py: its spec replaced); one
with no Tessera counterpart is denied, named.
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from admission.convert import names
from admission.convert.claims import Options
from admission.convert.nvidia_claims import CLAIM_KINDS, convert_claim
from admission.convert.pod import PodConversion, convert_pod_parts
from admission.convert.stored import difference, refusal
from dra_driver.vocabulary.errors import ConversionError
from dra_driver.vocabulary.excerpt import clip, excerpt

API_VERSION = "admission.k8s.io/v1"
# stored(namespace, name): the ResourceClaimTemplate of that name as the API server has it, None when there
# is none (from a watch: no API call per review)
StoredTemplate = Callable[[str, str], Mapping[str, Any] | None]


def _nothing_stored(namespace: str, name: str) -> None:
    return None


def _escape(key: str) -> str:
    return key.replace("~", "~0").replace("/", "~1")


def json_patch(
    metadata: Mapping[str, Any], spec: Mapping[str, Any], result: PodConversion
) -> list[dict[str, Any]]:
    """RFC 6902 operations turning the Pod into the converted one: only the parts the conversion touches."""
    ops: list[dict[str, Any]] = []
    for key in ("initContainers", "containers", "resourceClaims"):
        if key in result.spec and result.spec[key] != spec.get(key):
            ops.append(
                {"op": "replace" if key in spec else "add", "path": f"/spec/{key}", "value": result.spec[key]}
            )
    if "schedulerName" in spec and "schedulerName" not in result.spec:
        ops.append({"op": "remove", "path": "/spec/schedulerName"})
    annotations = result.metadata.get("annotations")
    if annotations != metadata.get("annotations"):
        op = "replace" if metadata.get("annotations") is not None else "add"
        ops.append({"op": op, "path": "/metadata/annotations", "value": annotations})
    key, value = names.CONVERTED_LABEL
    labels = metadata.get("labels")
    if not isinstance(labels, Mapping):
        ops.append({"op": "replace" if "labels" in metadata else "add", "path": "/metadata/labels",
                    "value": {key: value}})  # fmt: skip
    elif labels.get(key) != value:
        ops.append({"op": "replace" if key in labels else "add", "path": f"/metadata/labels/{_escape(key)}",
                    "value": value})  # fmt: skip
    return ops


def _response(uid: object, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": {"uid": uid, **fields}}


def deny(uid: object, message: str, code: int = 400, reason: str = "Invalid") -> dict[str, Any]:
    return _response(
        uid, allowed=False, status={"code": code, "reason": reason, "message": clip(message, 1000)}
    )


def _squatted(namespace: str, result: PodConversion, stored: StoredTemplate) -> str | None:
    """Why a template the Pod's claims would be made from is not the conversion's own, if one is not."""
    for t in result.templates:
        found = stored(namespace, t.name)
        problem = difference(found, t) if found is not None else None
        if problem is not None:
            return refusal(namespace, t, problem)
    return None


def _parts(request: Mapping[str, Any]) -> tuple[str, Mapping[str, Any], Mapping[str, Any]] | str:
    """The Pod's namespace, metadata and spec; a message naming the field when one is not what a Pod has."""
    pod = request.get("object")
    metadata = pod.get("metadata", {}) if isinstance(pod, Mapping) else None
    spec = pod.get("spec", {}) if isinstance(pod, Mapping) else None
    if not isinstance(metadata, Mapping) or not isinstance(spec, Mapping):
        return f"request.object: not a Pod with a metadata and a spec map: {excerpt(pod)}"
    namespace = request.get("namespace") or metadata.get("namespace") or "default"
    if not isinstance(namespace, str):
        return f"request.namespace: {excerpt(namespace)} is not a namespace name"
    return namespace, metadata, spec


def admit(
    review: Mapping[str, Any], options: Options, stored: StoredTemplate = _nothing_stored
) -> dict[str, Any]:
    """The AdmissionReview answer for `review`; anything but a Pod's CREATE is allowed as it is. Pure but
    for `stored`, which only reads."""
    request = review.get("request")
    if not isinstance(request, Mapping):
        return deny("", "not an AdmissionReview request: no .request")
    uid = request.get("uid", "")
    kind = request.get("kind")
    kind = kind if isinstance(kind, Mapping) else {}
    kind_name = kind.get("kind")
    if request.get("operation") != "CREATE" or request.get("subResource"):
        return _response(uid, allowed=True)
    if kind_name in CLAIM_KINDS and kind.get("group") == "resource.k8s.io":
        return _admit_claim(uid, request.get("object"))
    if kind_name != "Pod":
        return _response(uid, allowed=True)
    parts = _parts(request)
    if isinstance(parts, str):
        return deny(uid, parts)
    namespace, metadata, spec = parts
    try:
        result = convert_pod_parts(metadata, spec, options)
    except ConversionError as e:
        return deny(uid, str(e))
    if not result.changed:
        return _response(uid, allowed=True)
    squatted = _squatted(namespace, result, stored)
    if squatted is not None:
        return deny(uid, squatted, code=409, reason="Conflict")
    patch = json.dumps(json_patch(metadata, spec, result), separators=(",", ":")).encode()
    answer = _response(
        uid, allowed=True, patchType="JSONPatch", patch=base64.b64encode(patch).decode("ascii")
    )
    if result.notes:
        answer["response"]["warnings"] = [clip(n, 500) for n in result.notes]
    return answer


def _admit_claim(uid: object, obj: object) -> dict[str, Any]:
    """A claim (or template) written for NVIDIA's DRA driver: its spec replaced by the conversion's."""
    if not isinstance(obj, Mapping) or not isinstance(obj.get("spec"), Mapping):
        return deny(uid, f"request.object: not a claim with a spec map: {excerpt(obj)}")
    try:
        result = convert_claim(obj)
    except ConversionError as e:
        return deny(uid, str(e))
    if not result.changed:
        return _response(uid, allowed=True)
    patch = json.dumps([{"op": "replace", "path": "/spec", "value": result.obj["spec"]}]).encode()
    answer = _response(
        uid, allowed=True, patchType="JSONPatch", patch=base64.b64encode(patch).decode("ascii")
    )
    answer["response"]["warnings"] = [clip(line, 500) for line in (*result.summary, *result.notes)]
    return answer


def claim_match_expression(kind: str) -> str:
    """The matchConditions CEL that lets only claims (or templates: `kind`) naming one of NVIDIA's
    DeviceClasses or opaque-config drivers through (templates/admission-webhook.yaml; a test keeps them
    equal). Every field is tested with has() first: a failing condition would refuse the claim."""
    spec = "object.spec.spec" if kind == "ResourceClaimTemplate" else "object.spec"
    guard = (
        f"has(object.spec.spec) && has({spec}.devices)"
        if kind == "ResourceClaimTemplate"
        else (f"has({spec}.devices)")
    )
    d = f"{spec}.devices"
    nvidia = "endsWith('.nvidia.com')"
    requests = (
        f"(has({d}.requests) && {d}.requests.exists(r, "
        f"(has(r.exactly) && has(r.exactly.deviceClassName) && r.exactly.deviceClassName.{nvidia}) || "
        f"(has(r.firstAvailable) && r.firstAvailable.exists(s, "
        f"has(s.deviceClassName) && s.deviceClassName.{nvidia}))))"
    )
    configs = (
        f"(has({d}.config) && {d}.config.exists(c, "
        f"has(c.opaque) && has(c.opaque.driver) && c.opaque.driver.{nvidia}))"
    )
    return f"{guard} && ({requests} || {configs})"


def match_expression(resource_names: Sequence[str]) -> str:
    """The matchConditions CEL that lets only Pods naming one of `resource_names` through to the webhook
    (templates/admission.yaml carries it; a test keeps the two equal)."""
    names = "[" + ", ".join(f"'{n}'" for n in resource_names) + "]"
    per = (
        f"(has(c.resources) && ((has(c.resources.limits) && c.resources.limits.exists(k, k in {names})) || "
        f"(has(c.resources.requests) && c.resources.requests.exists(k, k in {names}))))"
    )
    return (
        f"object.spec.containers.exists(c, {per}) || "
        f"(has(object.spec.initContainers) && object.spec.initContainers.exists(c, {per}))"
    )
