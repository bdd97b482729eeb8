"""Whether a ResourceClaimTemplate found in the cluster is the conversion's own (pure).

A template's name is the hash of the content the conversion gives it, so anyone who can create templates in a
namespace can create one of that name first, with other content: a pod's claim would then be made from it.
A template is taken as ours only when it carries the conversion's label and its spec is the conversion's, as
the API server stores it (quantities in canonical form, empty fields it writes out); anything else is refused
by name, never assumed equal because the name is.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from typing import Any

from admission.convert import names
from admission.convert.pod import Template
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import parse_quantity

_BIG_EXPONENT = re.compile(r"[eE][+-]?\d{3,}")


def _empty(value: object) -> bool:
    """What the API server writes for a field nobody set (`metadata: {creationTimestamp: null}`)."""
    if isinstance(value, Mapping):
        return all(_empty(v) for v in value.values())
    return value is None or value in ("", [])


def _quantity(text: str) -> object:
    # bounded first: `1e99999999` would be a number of a hundred million digits
    if len(text) > 32 or _BIG_EXPONENT.search(text):
        return None
    try:
        return parse_quantity(text).value
    except ConfigError:
        return None


def same_content(stored: object, ours: object) -> bool:
    """`stored` means what `ours` says: equal, but for quantities written another way (`1024Mi` is stored as
    `1Gi`) and fields the store adds empty."""
    if isinstance(stored, Mapping) and isinstance(ours, Mapping):
        if any(k not in stored for k in ours):
            return False
        extra = [v for k, v in stored.items() if k not in ours]
        return all(_empty(v) for v in extra) and all(same_content(stored[k], ours[k]) for k in ours)
    if isinstance(stored, list) and isinstance(ours, list):
        return len(stored) == len(ours) and all(same_content(a, b) for a, b in zip(stored, ours, strict=True))
    if type(stored) is type(ours) and stored == ours:
        return True
    if isinstance(stored, str) and isinstance(ours, str):
        value = _quantity(ours)
        return value is not None and value == _quantity(stored)
    return False


def labelled(stored: Mapping[str, Any], label: tuple[str, str]) -> bool:
    metadata = stored.get("metadata")
    labels = metadata.get("labels") if isinstance(metadata, Mapping) else None
    return isinstance(labels, Mapping) and labels.get(label[0]) == label[1]


def dropped(stored: object, ours: object, path: str = "spec") -> list[str]:
    """The fields of `ours` that `stored` lacks, when lacking them is all that differs (what an API server
    with a feature gate off does to the fields of that feature); [] otherwise."""
    if isinstance(stored, Mapping) and isinstance(ours, Mapping):
        out = []
        for k, v in ours.items():
            if k not in stored:
                out.append(f"{path}.{k}")
            elif not same_content(stored[k], v):
                deeper = dropped(stored[k], v, f"{path}.{k}")
                if not deeper:
                    return []
                out += deeper
        return out
    if isinstance(stored, list) and isinstance(ours, list) and len(stored) == len(ours):
        out = []
        for i, (a, b) in enumerate(zip(stored, ours, strict=True)):
            if not same_content(a, b):
                deeper = dropped(a, b, f"{path}[{i}]")
                if not deeper:
                    return []
                out += deeper
        return out
    return []


def difference(stored: Mapping[str, Any], ours: Template) -> str | None:
    """None when `stored` is the conversion's template `ours`; else what is wrong with it, in words."""
    if not labelled(stored, names.MANAGED_BY):
        return f"it lacks the label {names.MANAGED_BY[0]}={names.MANAGED_BY[1]} of Tessera's conversion"
    if not same_content(stored.get("spec"), ours.spec):
        lost = dropped(stored.get("spec"), ours.spec)
        if lost and labelled(stored, names.MADE_BY):
            return (
                f"the API server stored it without {', '.join(lost[:3])}: a feature gate those fields need "
                "is off on this cluster (docs/install.md, feature gates), so its claims would not get what "
                "the pod asks for"
            )
        return "its spec is not the one Tessera's conversion gives that name"
    return None


def refusal(namespace: str, ours: Template, problem: str) -> str:
    """What a pod is told when a template of its conversion's name is not the conversion's: which, why,
    and the fix."""
    fix = (
        "Turn the gates on (kube-apiserver first), then delete that template "
        if problem.startswith("the API server stored it without")
        else "Delete or rename that template "
    )
    return (
        f"ResourceClaimTemplate {ours.name} in namespace {namespace} exists, but {problem}; the claim of "
        f"container {ours.container} cannot be made from it. {fix}"
        f"(kubectl delete resourceclaimtemplate -n {namespace} {ours.name}) and create the pod again"
    )


def made_by_webhook(stored: Mapping[str, Any]) -> bool:
    """Made by the webhook's reconciler (which may delete it once unused), not by `tessera convert` for a
    GitOps repository (never deleted)."""
    return labelled(stored, names.MADE_BY) and labelled(stored, names.MANAGED_BY)
