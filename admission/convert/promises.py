"""What admission promised a converted Pod, derived again from what the Pod carries (pure).

The webhook writes nothing while it answers the API server; its template reconciler (admission/templates.py)
makes the ResourceClaimTemplates of Pods the API server admitted. It never takes a template's content from
anything a tenant wrote: it runs the conversion again from the Pod's `admission.tessera.dev/converted`
record (each container's HAMi/Volcano resources as written, the selection annotations read), the container's
own env and the webhook's current options, and a template is promised only when the name so computed is the
one the Pod references. A forged record, or a catalog that changed since admission, gives another name: then
nothing is promised, and the problem says why and what to do.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.convert import names
from admission.convert.claims import Options, convert_ask
from admission.convert.parse import Selection, parse_container, parse_env_config, parse_selection
from admission.convert.pod import CONTAINER_LISTS, MAX_GPU_CONTAINERS, Template, template_name
from dra_driver.vocabulary.errors import ConversionError
from dra_driver.vocabulary.excerpt import excerpt

# The record is a few hundred bytes per container; the API server bounds all annotations at 256 KiB.
MAX_RECORD_CHARS = 64 * 1024
_RECORD = f"metadata.annotations[{names.CONVERTED_ANNOTATION}]"
_FIX = "delete the pod so that its controller makes it again (or create it again)"


@dataclass(frozen=True, slots=True)
class Promised:
    """A Pod's templates, re-derived: `references` (claim → template) are every template the Pod names (what
    the sweep keeps), `templates` (claim → template) those the conversion gives again under the same name
    (what may be made), `problems` (claim, or "" for the whole record → message) why one is not."""

    references: tuple[tuple[str, str], ...]
    templates: tuple[tuple[str, Template], ...] = ()
    problems: tuple[tuple[str, str], ...] = ()

    @property
    def messages(self) -> tuple[str, ...]:
        return tuple(m for _, m in self.problems)


def references(spec: Mapping[str, Any]) -> tuple[tuple[str, str], ...]:
    """(claim, template) for each of the Pod's claims made from a template (bounded: the API server allows
    few; more than the conversion could write are not ours)."""
    claims = spec.get("resourceClaims")
    out = []
    for c in claims[: 2 * MAX_GPU_CONTAINERS] if isinstance(claims, list) else ():
        if isinstance(c, Mapping) and isinstance(c.get("name"), str):
            template = c.get("resourceClaimTemplateName")
            if isinstance(template, str):
                out.append((str(c["name"]), template))
    return tuple(out)


def _containers(spec: Mapping[str, Any]) -> dict[str, tuple[str, Mapping[str, Any]]]:
    """Container name → (its field path, the container), init containers too."""
    out: dict[str, tuple[str, Mapping[str, Any]]] = {}
    for key, _ in CONTAINER_LISTS:
        containers = spec.get(key)
        for i, c in enumerate(containers if isinstance(containers, list) else ()):
            if isinstance(c, Mapping) and isinstance(c.get("name"), str):
                out.setdefault(str(c["name"]), (f"spec.{key}[{i}]", c))
    return out


def _record(metadata: Mapping[str, Any]) -> tuple[list[Any], Mapping[str, Any]]:
    """The record's containers and annotations; ConversionError when it is not one the webhook writes."""
    annotations = metadata.get("annotations")
    raw = annotations.get(names.CONVERTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    if not isinstance(raw, str):
        raise ConversionError(f"{_RECORD}: missing; only the webhook's conversion labels a pod as converted")
    if len(raw) > MAX_RECORD_CHARS:
        raise ConversionError(f"{_RECORD}: {len(raw)} characters, more than the conversion writes")
    try:
        record = json.loads(raw)
    except ValueError:
        record = None
    containers = record.get("containers") if isinstance(record, dict) else None
    recorded = record.get("annotations", {}) if isinstance(record, dict) else None
    if not isinstance(containers, list) or not isinstance(recorded, Mapping):
        raise ConversionError(f"{_RECORD}: not the record the conversion writes: {excerpt(raw)}")
    if len(containers) > MAX_GPU_CONTAINERS:
        raise ConversionError(f"{_RECORD}: {len(containers)} containers, more than the conversion writes")
    return containers, recorded


def claim_of(entry: object) -> str:
    """The claim a record entry is for ("" when it names none)."""
    claim = entry.get("claim") if isinstance(entry, Mapping) else None
    return claim if isinstance(claim, str) else ""


def _template(
    entry: object, pod: dict[str, tuple[str, Mapping[str, Any]]], selection: Selection, options: Options
) -> Template:
    """One record entry → the template the conversion gives it now."""
    if not isinstance(entry, Mapping):
        raise ConversionError(f"{_RECORD}: an entry is not a map: {excerpt(entry)}")
    container, claim, written = entry.get("container"), entry.get("claim"), entry.get("from")
    if not isinstance(container, str) or not isinstance(claim, str) or not isinstance(written, Mapping):
        raise ConversionError(f"{_RECORD}: an entry lacks its container, claim or from: {excerpt(entry)}")
    if container not in pod:
        raise ConversionError(f"{_RECORD}: names container {excerpt(container)}, which the pod does not have")
    path, actual = pod[container]
    # the resources as they were written, with the container's own env (immutable in a Pod's spec)
    ask = parse_container({"name": container, "resources": {"limits": dict(written)}}, path)
    if ask is None:
        raise ConversionError(f"{_RECORD}: container {container} has no HAMi or Volcano resource in from")
    converted = convert_ask(ask, selection, options, parse_env_config(actual, path))
    return Template(
        template_name(ask.dialect.name, converted.spec), converted.spec, container, converted.summary
    )


def rederive(metadata: Mapping[str, Any], spec: Mapping[str, Any], options: Options) -> Promised:
    """The templates the conversion promised this Pod, as far as what it carries shows them."""
    refs = references(spec)
    try:
        entries, recorded = _record(metadata)
        selection = parse_selection(recorded)
    except ConversionError as e:
        return Promised(refs, problems=(("", f"{e}; {_FIX}"),))
    referenced, containers = dict(refs), _containers(spec)
    templates, problems = [], []
    for entry in entries:
        claim = claim_of(entry)
        try:
            template = _template(entry, containers, selection, options)
        except ConversionError as e:
            problems.append((claim, f"{e}; {_FIX}"))
            continue
        wanted = referenced.get(claim)
        if wanted is None:
            continue  # the pod makes no claim of it: nothing to make
        if wanted != template.name:
            problems.append((claim,
                f"spec.resourceClaims[{claim}]: references ResourceClaimTemplate {wanted}, but the "
                f"conversion of container {template.container} gives {template.name} now (a record not "
                "written by the webhook, or GPU products offered that changed since the pod was admitted); "
                f"{_FIX}"
            ))  # fmt: skip
            continue
        templates.append((claim, template))
    return Promised(refs, tuple(templates), tuple(problems))
