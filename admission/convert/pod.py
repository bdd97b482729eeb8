"""A Pod (or a controller's pod template) with HAMi/Volcano GPU requests → the same Pod on Tessera (pure).

Each container (init containers too) that names a foreign resource gets its own pod claim, made by the
resourceclaim controller from a ResourceClaimTemplate, and a `resources.claims` entry naming it; the foreign
resources leave its requests and limits; the annotation `admission.tessera.dev/converted` records what came
from what. Why templates and not ResourceClaims: at admission a Pod has no UID yet (and, made by a controller,
often no name), so nothing could own a claim made now, and a Pod deleted before it schedules would leave it
behind. A claim made from a template is owned by its Pod and goes with it. The templates are named by the hash
of their content (`tessera-hami-3f2a…`), so every Pod asking the same shares one and converting twice
creates nothing new.
"""

from __future__ import annotations

import copy
import hashlib
import json
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.convert import names
from admission.convert.claims import Options, convert_ask
from admission.convert.nvidia_claims import CLAIM_KINDS, ClaimConversion, convert_claim
from admission.convert.parse import GpuAsk, parse_container, parse_env_config, parse_selection
from dra_driver.vocabulary.errors import ConversionError

CONTAINER_LISTS = (("initContainers", "init-"), ("containers", ""))
# Containers converted per pod: each is a claim and a template, so a pod of 3,000 GPU containers would be
# 3,000 of both (a pod may have any number of containers; the API server sets no bound).
MAX_GPU_CONTAINERS = 64


@dataclass(frozen=True, slots=True)
class Template:
    """A ResourceClaimTemplate to create in the Pod's namespace (named by the hash of its spec)."""

    name: str
    spec: dict[str, Any]
    container: str
    summary: str

    def manifest(self, namespace: str | None, *, made_by_webhook: bool = False) -> dict[str, Any]:
        """The object; `made_by_webhook` adds the label of templates the webhook may delete once unused."""
        labels = dict([names.MANAGED_BY, names.MADE_BY] if made_by_webhook else [names.MANAGED_BY])
        metadata: dict[str, Any] = {"name": self.name, "labels": labels}
        if namespace:
            metadata["namespace"] = namespace
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaimTemplate",
            "metadata": metadata,
            "spec": copy.deepcopy(self.spec),
        }


@dataclass(frozen=True, slots=True)
class PodConversion:
    """The rewritten pod `metadata` and `spec`, the templates its claims come from, and notes (what of HAMi's
    meaning Tessera does not keep)."""

    metadata: dict[str, Any]
    spec: dict[str, Any]
    templates: tuple[Template, ...]
    notes: tuple[str, ...]

    @property
    def changed(self) -> bool:
        return bool(self.templates)


def template_name(dialect: str, spec: Mapping[str, Any]) -> str:
    digest = hashlib.sha256(json.dumps(spec, sort_keys=True, separators=(",", ":")).encode()).hexdigest()
    return f"tessera-{dialect}-{digest[:16]}"


def _drop_foreign(resources: dict[str, Any]) -> None:
    for key in ("requests", "limits"):
        section = resources.get(key)
        if isinstance(section, dict):
            for name in [k for k in section if names.dialect_of(k) is not None]:
                del section[name]
            if not section:
                del resources[key]


def _notes(selection_policy: tuple[str | None, str | None]) -> list[str]:
    gpu_policy, node_policy = selection_policy
    out = []
    if gpu_policy:
        out.append(
            f"{names.GPU_SCHEDULER_POLICY}: {gpu_policy} not honoured per pod: the scheduler "
            "allocates devices first-fit in the order the node publishes them (docs/scheduling.md)"
        )
    if node_policy:
        out.append(
            f"{names.NODE_SCHEDULER_POLICY}: {node_policy} not honoured per pod: node scoring is the "
            "scheduler's NodeResourcesFit strategy (docs/scheduling.md)"
        )
    return out


def convert_pod_parts(
    metadata: Mapping[str, Any], spec: Mapping[str, Any], options: Options, *, where: str = ""
) -> PodConversion:
    """Convert a pod's `metadata` and `spec`; `where` prefixes field paths (`spec.template.` for a
    Deployment). Returns them unchanged (and no templates) when no container names a foreign resource."""
    new_spec: dict[str, Any] = copy.deepcopy(dict(spec))
    new_meta: dict[str, Any] = copy.deepcopy(dict(metadata))
    annotations = new_meta.get("annotations") or {}
    if not isinstance(annotations, Mapping):
        raise ConversionError(f"{where}metadata.annotations: must be a map of strings")
    asks: list[tuple[dict[str, Any], GpuAsk, str, dict[str, object]]] = []
    for key, prefix in CONTAINER_LISTS:
        containers = new_spec.get(key)
        for i, c in enumerate(containers if isinstance(containers, list) else ()):
            if isinstance(c, dict):
                path = f"{where}spec.{key}[{i}]"
                ask = parse_container(c, path)
                if ask is not None and len(asks) == MAX_GPU_CONTAINERS:
                    raise ConversionError(
                        f"{path}: more than {MAX_GPU_CONTAINERS} containers of this pod ask for a HAMi "
                        f"or Volcano GPU; Tessera converts at most {MAX_GPU_CONTAINERS} per pod: give the "
                        "others no GPU, or split the work over several pods"
                    )
                if ask is not None:
                    asks.append((c, ask, f"{names.CLAIM_PREFIX}-{prefix}{i}", parse_env_config(c, path)))
    if not asks:
        return PodConversion(dict(metadata), dict(spec), (), ())
    selection = parse_selection(annotations)
    claims = new_spec.setdefault("resourceClaims", [])
    taken = {c.get("name") for c in claims if isinstance(c, Mapping)}
    templates, record, notes = [], [], _notes((selection.gpu_policy, selection.node_policy))
    for container, ask, claim, config in asks:
        if claim in taken:
            raise ConversionError(
                f"{where}spec.resourceClaims: already has a claim named {claim}; rename it, "
                "Tessera's conversion uses that name"
            )
        converted = convert_ask(ask, selection, options, config)
        name = template_name(ask.dialect.name, converted.spec)
        templates.append(Template(name, converted.spec, ask.container, converted.summary))
        notes.extend(converted.notes)
        claims.append({"name": claim, "resourceClaimTemplateName": name})
        resources = container.setdefault("resources", {})
        _drop_foreign(resources)
        resources.setdefault("claims", []).append({"name": claim})
        record.append(
            {
                "container": ask.container,
                "from": dict(ask.written),
                "claim": claim,
                "template": name,
                "gets": converted.summary,
            }
        )
    scheduler = new_spec.get("schedulerName")
    if isinstance(scheduler, str) and scheduler in options.replace_schedulers:
        del new_spec["schedulerName"]
        notes.append(f"schedulerName {scheduler} removed: the default scheduler allocates Tessera's claims")
    summary: dict[str, Any] = {"containers": record}
    if selection.written:
        summary["annotations"] = dict(selection.written)
    if notes:
        summary["notes"] = notes
    new_meta["annotations"] = {**annotations, names.CONVERTED_ANNOTATION: json.dumps(summary, sort_keys=True)}
    return PodConversion(new_meta, new_spec, tuple(templates), tuple(notes))


# ---- whole objects: a Pod, or a workload whose pod template makes Pods (`tessera convert`, `explain`) ----

# kind → path of its pod template (none for a Pod itself)
TEMPLATE_PATHS: dict[str, tuple[str, ...]] = {
    "Pod": (),
    "Deployment": ("spec", "template"),
    "StatefulSet": ("spec", "template"),
    "DaemonSet": ("spec", "template"),
    "ReplicaSet": ("spec", "template"),
    "Job": ("spec", "template"),
    "CronJob": ("spec", "jobTemplate", "spec", "template"),
    "PodTemplate": ("template",),
}


@dataclass(frozen=True, slots=True)
class ObjectConversion:
    """The object as Tessera runs it, the templates to create beside it, and the pod part's conversion."""

    obj: dict[str, Any]
    pod: PodConversion
    claim: ClaimConversion | None = None  # a ResourceClaim(Template) written for NVIDIA's DRA driver

    def manifests(self) -> list[dict[str, Any]]:
        """The templates first (they must exist when the Pod is made), then the object."""
        namespace = (self.obj.get("metadata") or {}).get("namespace")
        return [t.manifest(namespace) for t in self.pod.templates] + [self.obj]


def _name(obj: Mapping[str, Any]) -> str:
    kind = obj.get("kind") if isinstance(obj.get("kind"), str) else "object"
    meta = obj.get("metadata")
    name = meta.get("name") if isinstance(meta, Mapping) else None
    return f"{kind}/{name}" if isinstance(name, str) else str(kind)


def convert_object(obj: Mapping[str, Any], options: Options) -> ObjectConversion:
    """A Pod or workload, or a ResourceClaim(Template) written for NVIDIA's DRA driver (`nvidia_claims`); any
    other kind is returned as it is (a file may hold Services too)."""
    if str(obj.get("kind")) in CLAIM_KINDS:
        try:
            claim = convert_claim(obj)
        except ConversionError as e:
            raise type(e)(f"{_name(obj)}: {e}") from e
        return ObjectConversion(claim.obj, PodConversion({}, {}, (), claim.notes), claim)
    out: dict[str, Any] = copy.deepcopy(dict(obj))
    path = TEMPLATE_PATHS.get(str(obj.get("kind")))
    if path is None:
        return ObjectConversion(out, PodConversion({}, {}, (), ()))
    holder: Any = out
    for key in path:
        holder = holder.get(key) if isinstance(holder, dict) else None
    if not isinstance(holder, dict):
        raise ConversionError(f"{_name(obj)}: has no {'.'.join(path)}; give the pod template")
    where = "".join(f"{key}." for key in path)
    metadata, spec = holder.get("metadata") or {}, holder.get("spec")
    if not isinstance(spec, Mapping) or not isinstance(metadata, Mapping):
        raise ConversionError(f"{_name(obj)}: {where}spec must be a pod spec")
    try:
        converted = convert_pod_parts(metadata, spec, options, where=where)
    except ConversionError as e:
        raise ConversionError(f"{_name(obj)}: {e}") from e
    if converted.changed:
        holder["metadata"], holder["spec"] = converted.metadata, converted.spec
    return ObjectConversion(out, converted)
