"""The Container Device Interface spec: Tessera's container edits (dra_driver/vocabulary/container.py) as the
JSON a container runtime reads, with a strict round trip (pure).

Only what Tessera writes is modelled: devices with container edits (env, character device nodes at their host
path, bind mounts) and spec-wide container edits, which a runtime applies once whenever any device of the
spec is injected. Reading back one of Tessera's own specs (a claim's marker, docs/architecture.md) refuses
anything else.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.vocabulary.container import ContainerEdits, DeviceNode, Mount
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import excerpt

CDI_VERSION = "0.6.0"
_SUPPORTED_VERSIONS = ("0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_DEVICE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.:-]*$")
_KIND_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*/[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


class SpecError(ValueError):
    """A value that is not a valid CDI spec (or not one of Tessera's); callers translate it into their own
    errors (cdi.edits, cdi.writer)."""


def _fail(path: str, problem: str) -> SpecError:
    return SpecError(f"CDI spec {path}: {problem}")


def _str(d: Mapping[str, Any], key: str, path: str, *, required: bool = True) -> str | None:
    value = d.get(key)
    if value is None:
        if required:
            raise _fail(f"{path}.{key}", "missing")
        return None
    if not isinstance(value, str):
        raise _fail(f"{path}.{key}", f"must be a string, got {excerpt(value)}")
    return value


def _int(d: Mapping[str, Any], key: str, path: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise _fail(f"{path}.{key}", f"must be an integer, got {excerpt(value)}")
    return value


def _strs(d: Mapping[str, Any], key: str, path: str) -> tuple[str, ...]:
    value = d.get(key)
    if value is None:
        return ()
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise _fail(f"{path}.{key}", f"must be a list of strings, got {excerpt(value)}")
    return tuple(value)


def _objects(d: Mapping[str, Any], key: str, path: str) -> list[Mapping[str, Any]]:
    value = d.get(key)
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, Mapping) for v in value):
        raise _fail(f"{path}.{key}", "must be a list of objects")
    return value


def _drop_empty(d: dict[str, Any]) -> dict[str, Any]:
    return {k: v for k, v in d.items() if v not in (None, [], {})}


def _node_to_dict(node: DeviceNode) -> dict[str, Any]:
    return {"path": node.path, "hostPath": node.path, "type": "c", "major": node.major, "minor": node.minor}


def _node_from_dict(d: Mapping[str, Any], path: str) -> DeviceNode:
    node_path = _str(d, "path", path) or ""
    if _str(d, "hostPath", path, required=False) not in (None, node_path):
        raise _fail(f"{path}.hostPath", "Tessera's device nodes are at the same path on the host")
    if _str(d, "type", path, required=False) not in (None, "c"):
        raise _fail(f"{path}.type", "Tessera's device nodes are character devices (c)")
    major, minor = _int(d, "major", path), _int(d, "minor", path)
    if major is None or minor is None:
        raise _fail(path, "a device node needs its major and minor")
    return DeviceNode(path=node_path, major=major, minor=minor)


def _mount_to_dict(mount: Mount) -> dict[str, Any]:
    return _drop_empty(
        {
            "hostPath": mount.host_path,
            "containerPath": mount.container_path,
            "type": "bind",
            "options": list(mount.options),
        }
    )


def _mount_from_dict(d: Mapping[str, Any], path: str) -> Mount:
    if _str(d, "type", path, required=False) not in (None, "bind"):
        raise _fail(f"{path}.type", "Tessera's mounts are bind mounts")
    return Mount(
        host_path=_str(d, "hostPath", path) or "",
        container_path=_str(d, "containerPath", path) or "",
        options=_strs(d, "options", path),
    )


def _edits_to_dict(edits: ContainerEdits) -> dict[str, Any]:
    return _drop_empty(
        {
            "env": list(edits.env),
            "deviceNodes": [_node_to_dict(n) for n in edits.device_nodes],
            "mounts": [_mount_to_dict(m) for m in edits.mounts],
        }
    )


def _edits_from_dict(d: Mapping[str, Any], path: str) -> ContainerEdits:
    if d.get("hooks"):
        raise _fail(f"{path}.hooks", "Tessera's specs have no hooks")
    nodes = tuple(
        _node_from_dict(n, f"{path}.deviceNodes[{i}]") for i, n in enumerate(_objects(d, "deviceNodes", path))
    )
    mounts = tuple(
        _mount_from_dict(m, f"{path}.mounts[{i}]") for i, m in enumerate(_objects(d, "mounts", path))
    )
    try:
        return ContainerEdits(env=_strs(d, "env", path), device_nodes=nodes, mounts=mounts)
    except ConfigError as e:
        raise _fail(f"{path}.env", str(e)) from e


@dataclass(frozen=True, slots=True)
class Device:
    name: str
    container_edits: ContainerEdits

    def __post_init__(self) -> None:
        if not _DEVICE_NAME_RE.match(self.name):
            raise _fail("devices[].name", f"{excerpt(self.name)} is not a valid CDI device name")


def _annotations(d: Mapping[str, Any]) -> dict[str, str]:
    value = d.get("annotations")
    if value is None:
        return {}
    if not isinstance(value, Mapping) or not all(
        isinstance(k, str) and isinstance(v, str) for k, v in value.items()
    ):
        raise _fail("annotations", "must be an object of strings")
    return dict(value)


@dataclass(frozen=True, slots=True)
class Spec:
    kind: str
    devices: tuple[Device, ...]
    container_edits: ContainerEdits = field(default_factory=ContainerEdits)
    cdi_version: str = CDI_VERSION
    # Spec-wide annotations (CDI 0.6.0+): runtimes ignore them; Tessera keeps its own markers here.
    annotations: Mapping[str, str] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if not _KIND_RE.match(self.kind):
            raise _fail("kind", f"{excerpt(self.kind)} is not vendor/class")
        if self.cdi_version not in _SUPPORTED_VERSIONS:
            raise _fail(
                "cdiVersion", f"{excerpt(self.cdi_version)} is not one of {', '.join(_SUPPORTED_VERSIONS)}"
            )
        if not self.devices:
            raise _fail("devices", "a spec needs at least one device")
        names = [d.name for d in self.devices]
        if len(set(names)) != len(names):
            raise _fail("devices", f"device names repeat: {excerpt(names)}")

    def qualified_names(self) -> tuple[str, ...]:
        return tuple(f"{self.kind}={d.name}" for d in self.devices)

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "cdiVersion": self.cdi_version,
            "kind": self.kind,
            "devices": [
                {"name": d.name, "containerEdits": _edits_to_dict(d.container_edits)} for d in self.devices
            ],
        }
        if not self.container_edits.empty:
            out["containerEdits"] = _edits_to_dict(self.container_edits)
        if self.annotations:
            out["annotations"] = dict(self.annotations)
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> Spec:
        devices = []
        for i, dev in enumerate(_objects(d, "devices", "")):
            edits = dev.get("containerEdits") or {}
            if not isinstance(edits, Mapping):
                raise _fail(f"devices[{i}].containerEdits", "must be an object")
            devices.append(
                Device(
                    name=_str(dev, "name", f"devices[{i}]") or "",
                    container_edits=_edits_from_dict(edits, f"devices[{i}].containerEdits"),
                )
            )
        spec_edits = d.get("containerEdits") or {}
        if not isinstance(spec_edits, Mapping):
            raise _fail("containerEdits", "must be an object")
        return cls(
            kind=_str(d, "kind", "") or "",
            devices=tuple(devices),
            container_edits=_edits_from_dict(spec_edits, "containerEdits"),
            cdi_version=_str(d, "cdiVersion", "") or "",
            annotations=_annotations(d),
        )
