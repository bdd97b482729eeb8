"""An AdmissionReview (admission.k8s.io/v1) in, its answer out: the conversion as a JSON patch.

A Pod being created is converted (admission.convert); its claim templates are handed to `ensure_templates`
(the webhook's client makes them in the Pod's namespace, unless the request is a dry run) before the answer
allows the Pod with a patch. A refused conversion is a denial whose message names the field and the fix; the
conversion's notes become warnings (`kubectl` prints them).
"""

from __future__ import annotations

import base64
import json
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from admission.convert.claims import Options
from admission.convert.pod import PodConversion, Template, convert_pod_parts
from dra_driver.values.errors import ConversionError, TesseraError
from dra_driver.values.excerpt import clip

API_VERSION = "admission.k8s.io/v1"
# ensure_templates(namespace, templates, dry_run) makes the templates exist, or raises a TesseraError
EnsureTemplates = Callable[[str, Sequence[Template], bool], None]


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
    return ops


def _response(uid: object, **fields: Any) -> dict[str, Any]:
    return {"apiVersion": API_VERSION, "kind": "AdmissionReview", "response": {"uid": uid, **fields}}


def deny(uid: object, message: str, code: int = 400) -> dict[str, Any]:
    return _response(
        uid, allowed=False, status={"code": code, "reason": "Invalid", "message": clip(message, 1000)}
    )


def admit(review: Mapping[str, Any], options: Options, ensure_templates: EnsureTemplates) -> dict[str, Any]:
    """The AdmissionReview answer for `review`; anything but a Pod's CREATE is allowed as it is."""
    request = review.get("request")
    if not isinstance(request, Mapping):
        return deny("", "not an AdmissionReview request: no .request")
    uid = request.get("uid", "")
    pod = request.get("object")
    kind = request.get("kind")
    is_pod = isinstance(kind, Mapping) and kind.get("kind") == "Pod" and not request.get("subResource")
    if request.get("operation") != "CREATE" or not is_pod or not isinstance(pod, Mapping):
        return _response(uid, allowed=True)
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    try:
        result = convert_pod_parts(metadata, spec, options)
    except ConversionError as e:
        return deny(uid, str(e))
    if not result.changed:
        return _response(uid, allowed=True)
    namespace = str(request.get("namespace") or metadata.get("namespace") or "default")
    try:
        ensure_templates(namespace, result.templates, bool(request.get("dryRun")))
    except TesseraError as e:
        return deny(uid, f"cannot create the claim templates this pod needs: {e}", code=500)
    patch = json.dumps(json_patch(metadata, spec, result), separators=(",", ":")).encode()
    answer = _response(
        uid, allowed=True, patchType="JSONPatch", patch=base64.b64encode(patch).decode("ascii")
    )
    if result.notes:
        answer["response"]["warnings"] = [clip(n, 500) for n in result.notes]
    return answer


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
