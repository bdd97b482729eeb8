"""The Container Device Interface spec, as plain values with a strict dict round trip.

Only the parts Tessera writes are modelled: devices with container edits (env, device nodes, mounts, hooks)
and spec-wide container edits, which a runtime applies once whenever any device of the spec is injected.
"""

from __future__ import annotations

import re
import reprlib
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

CDI_VERSION = "0.6.0"
_SUPPORTED_VERSIONS = ("0.6.0", "0.7.0", "0.8.0", "1.0.0", "1.1.0")
_DEVICE_NAME_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.:-]*$")
_KIND_RE = re.compile(r"^[a-zA-Z0-9][a-zA-Z0-9_.-]*/[a-zA-Z0-9][a-zA-Z0-9_.-]*$")


class SpecError(ValueError):
    """A value that is not a valid CDI spec. This module imports nothing of Tessera's (it is the leaf the
    families build on); callers translate it into their own errors (cdi.edits, cdi.writer)."""


_SHOWN = reprlib.Repr()
_SHOWN.maxstring = _SHOWN.maxother = 60
_SHOWN.maxlist = _SHOWN.maxdict = 6


def excerpt(value: object) -> str:
    """A bounded repr: a bad value from a file is shown, never printed whole."""
    try:
        return _SHOWN.repr(value)
    except ValueError:  # an int too large to print
        return f"<{type(value).__name__} too large to show>"


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


@dataclass(frozen=True, slots=True)
class DeviceNode:
    path: str
    host_path: str | None = None
    type: str | None = "c"
    major: int | None = None
    minor: int | None = None
    file_mode: int | None = None
    permissions: str | None = None
    uid: int | None = None
    gid: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_empty(
            {
                "path": self.path,
                "hostPath": self.host_path,
                "type": self.type,
                "major": self.major,
                "minor": self.minor,
                "fileMode": self.file_mode,
                "permissions": self.permissions,
                "uid": self.uid,
                "gid": self.gid,
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str) -> DeviceNode:
        return cls(
            path=_str(d, "path", path) or "",
            host_path=_str(d, "hostPath", path, required=False),
            type=_str(d, "type", path, required=False),
            major=_int(d, "major", path),
            minor=_int(d, "minor", path),
            file_mode=_int(d, "fileMode", path),
            permissions=_str(d, "permissions", path, required=False),
            uid=_int(d, "uid", path),
            gid=_int(d, "gid", path),
        )


@dataclass(frozen=True, slots=True)
class Mount:
    host_path: str
    container_path: str
    type: str | None = "bind"
    options: tuple[str, ...] = ()

    def to_dict(self) -> dict[str, Any]:
        return _drop_empty(
            {
                "hostPath": self.host_path,
                "containerPath": self.container_path,
                "type": self.type,
                "options": list(self.options),
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str) -> Mount:
        return cls(
            host_path=_str(d, "hostPath", path) or "",
            container_path=_str(d, "containerPath", path) or "",
            type=_str(d, "type", path, required=False),
            options=_strs(d, "options", path),
        )


@dataclass(frozen=True, slots=True)
class Hook:
    hook_name: str  # prestart, createRuntime, createContainer, startContainer, poststart, poststop
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None

    def to_dict(self) -> dict[str, Any]:
        return _drop_empty(
            {
                "hookName": self.hook_name,
                "path": self.path,
                "args": list(self.args),
                "env": list(self.env),
                "timeout": self.timeout,
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str) -> Hook:
        return cls(
            hook_name=_str(d, "hookName", path) or "",
            path=_str(d, "path", path) or "",
            args=_strs(d, "args", path),
            env=_strs(d, "env", path),
            timeout=_int(d, "timeout", path),
        )


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    env: tuple[str, ...] = ()  # "NAME=value"
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()
    hooks: tuple[Hook, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.env:
            if "=" not in entry or entry.startswith("="):
                raise _fail("containerEdits.env", f"{excerpt(entry)} is not NAME=value")

    @property
    def empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts or self.hooks)

    def to_dict(self) -> dict[str, Any]:
        return _drop_empty(
            {
                "env": list(self.env),
                "deviceNodes": [n.to_dict() for n in self.device_nodes],
                "mounts": [m.to_dict() for m in self.mounts],
                "hooks": [h.to_dict() for h in self.hooks],
            }
        )

    @classmethod
    def from_dict(cls, d: Mapping[str, Any], path: str) -> ContainerEdits:
        return cls(
            env=_strs(d, "env", path),
            device_nodes=tuple(
                DeviceNode.from_dict(n, f"{path}.deviceNodes[{i}]")
                for i, n in enumerate(_objects(d, "deviceNodes", path))
            ),
            mounts=tuple(
                Mount.from_dict(m, f"{path}.mounts[{i}]") for i, m in enumerate(_objects(d, "mounts", path))
            ),
            hooks=tuple(
                Hook.from_dict(h, f"{path}.hooks[{i}]") for i, h in enumerate(_objects(d, "hooks", path))
            ),
        )


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
                {"name": d.name, "containerEdits": d.container_edits.to_dict()} for d in self.devices
            ],
        }
        if not self.container_edits.empty:
            out["containerEdits"] = self.container_edits.to_dict()
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
                    container_edits=ContainerEdits.from_dict(edits, f"devices[{i}].containerEdits"),
                )
            )
        spec_edits = d.get("containerEdits") or {}
        if not isinstance(spec_edits, Mapping):
            raise _fail("containerEdits", "must be an object")
        return cls(
            kind=_str(d, "kind", "") or "",
            devices=tuple(devices),
            container_edits=ContainerEdits.from_dict(spec_edits, "containerEdits"),
            cdi_version=_str(d, "cdiVersion", "") or "",
            annotations=_annotations(d),
        )
