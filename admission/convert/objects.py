"""Converting whole objects: a Pod, or a workload whose pod template makes Pods (pure).

`tessera convert` and `tessera explain` read files of such objects; the webhook only ever sees Pods.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from admission.convert.claims import Options
from admission.convert.pod import PodConversion, convert_pod_parts
from dra_driver.values.errors import ConversionError

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
    """A Pod or workload; any other kind is returned as it is (a file may hold Services too)."""
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
