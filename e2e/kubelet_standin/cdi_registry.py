"""CDI device resolution as a container runtime does it (containerd and CRI-O use the CDI library): scan the
spec directories, validate each spec, index devices by fully-qualified name (`vendor/class=name`), and inject
the requested devices. Written from the CDI specification; it knows nothing of how Tessera writes specs."""

from __future__ import annotations

import json
import os
import re
import stat
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml

from e2e.kubelet_standin.container_edits import (
    ContainerConfig,
    DeviceNodeEdit,
    EditList,
    HookEdit,
    MountEdit,
    apply_edits,
)
from e2e.kubelet_standin.errors import CdiError

log = structlog.get_logger(__name__)

KNOWN_CDI_VERSIONS = ("0.3.0", "0.4.0", "0.5.0", "0.6.0", "0.7.0", "0.8.0", "0.9.0", "1.0.0", "1.1.0")
HOOK_NAMES = ("prestart", "createRuntime", "createContainer", "startContainer", "poststart", "poststop")
_VENDOR_RE = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_.-]*[A-Za-z0-9])?$")
_CLASS_RE = re.compile(r"^[A-Za-z](?:[A-Za-z0-9_-]*[A-Za-z0-9])?$")
_NAME_RE = re.compile(r"^[A-Za-z0-9](?:[A-Za-z0-9_.:-]*[A-Za-z0-9])?$")


def parse_qualified_name(device: str) -> tuple[str, str, str]:
    """`vendor/class=name` → (vendor, class, name), validated as the CDI library does."""
    kind, sep, name = device.partition("=")
    vendor, slash, klass = kind.partition("/")
    if not sep or not slash:
        raise CdiError(f"{device!r} is not a fully-qualified CDI device name (vendor/class=name)")
    if not _VENDOR_RE.match(vendor):
        raise CdiError(f"{device!r}: invalid vendor {vendor!r}")
    if not _CLASS_RE.match(klass):
        raise CdiError(f"{device!r}: invalid class {klass!r}")
    if not _NAME_RE.match(name):
        raise CdiError(f"{device!r}: invalid device name {name!r}")
    return vendor, klass, name


@dataclass(frozen=True, slots=True)
class _Spec:
    path: Path
    kind: str
    edits: EditList
    devices: Mapping[str, EditList]


def _strs(raw: object, where: str) -> tuple[str, ...]:
    if raw is None:
        return ()
    if not isinstance(raw, list) or not all(isinstance(v, str) for v in raw):
        raise CdiError(f"{where}: must be a list of strings")
    return tuple(raw)


def _objects(raw: object, where: str) -> list[Mapping[str, Any]]:
    if raw is None:
        return []
    if not isinstance(raw, list) or not all(isinstance(v, Mapping) for v in raw):
        raise CdiError(f"{where}: must be a list of objects")
    return raw


def _opt_int(d: Mapping[str, Any], key: str, where: str) -> int | None:
    value = d.get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int):
        raise CdiError(f"{where}.{key}: must be an integer")
    return value


def _device_node(d: Mapping[str, Any], where: str) -> DeviceNodeEdit:
    path = d.get("path")
    if not isinstance(path, str) or not path:
        raise CdiError(f"{where}.path: missing")
    host_path = d.get("hostPath") or path
    dev_type = d.get("type") or ""
    major, minor = _opt_int(d, "major", where), _opt_int(d, "minor", where)
    if dev_type not in ("", "b", "c", "u", "p"):
        raise CdiError(f"{where}.type: invalid device type {dev_type!r}")
    if not dev_type or (dev_type != "p" and (major is None or minor is None)):
        # The runtime fills in what the spec leaves out from the host's device node; no node, no container.
        try:
            st = os.stat(host_path)
        except OSError as e:
            raise CdiError(f"{where}: cannot stat host device {host_path}: {e.strerror}") from e
        if stat.S_ISCHR(st.st_mode):
            dev_type = dev_type or "c"
        elif stat.S_ISBLK(st.st_mode):
            dev_type = dev_type or "b"
        else:
            raise CdiError(f"{where}: host path {host_path} is not a device node")
        major = os.major(st.st_rdev) if major is None else major
        minor = os.minor(st.st_rdev) if minor is None else minor
    permissions = d.get("permissions") or ""
    if permissions and not set(permissions) <= set("rwm"):
        raise CdiError(f"{where}.permissions: {permissions!r} is not a subset of rwm")
    return DeviceNodeEdit(
        path=path,
        host_path=host_path,
        type=dev_type,
        major=major or 0,
        minor=minor or 0,
        permissions=permissions,
        file_mode=_opt_int(d, "fileMode", where),
        uid=_opt_int(d, "uid", where),
        gid=_opt_int(d, "gid", where),
    )


def _mount(d: Mapping[str, Any], where: str) -> MountEdit:
    host_path, container_path = d.get("hostPath"), d.get("containerPath")
    if not isinstance(host_path, str) or not host_path:
        raise CdiError(f"{where}.hostPath: missing")
    if not isinstance(container_path, str) or not container_path.startswith("/"):
        raise CdiError(f"{where}.containerPath: must be an absolute path")
    return MountEdit(
        host_path=host_path,
        container_path=container_path,
        type=str(d.get("type") or ""),
        options=_strs(d.get("options"), f"{where}.options"),
    )


def _hook(d: Mapping[str, Any], where: str) -> HookEdit:
    name, path = d.get("hookName"), d.get("path")
    if name not in HOOK_NAMES:
        raise CdiError(f"{where}.hookName: {name!r} is not one of {', '.join(HOOK_NAMES)}")
    if not isinstance(path, str) or not path:
        raise CdiError(f"{where}.path: missing")
    return HookEdit(
        hook_name=str(name),
        path=path,
        args=_strs(d.get("args"), f"{where}.args"),
        env=_strs(d.get("env"), f"{where}.env"),
        timeout=_opt_int(d, "timeout", where),
    )


def parse_edits(raw: object, where: str) -> EditList:
    if raw is None:
        return EditList()
    if not isinstance(raw, Mapping):
        raise CdiError(f"{where}: must be an object")
    env = _strs(raw.get("env"), f"{where}.env")
    for k, entry in enumerate(env):
        if "=" not in entry or entry.startswith("="):
            raise CdiError(f"{where}.env[{k}]: {entry!r} is not KEY=VALUE")
    return EditList(
        env=env,
        device_nodes=tuple(
            _device_node(d, f"{where}.deviceNodes[{k}]")
            for k, d in enumerate(_objects(raw.get("deviceNodes"), f"{where}.deviceNodes"))
        ),
        mounts=tuple(
            _mount(d, f"{where}.mounts[{k}]")
            for k, d in enumerate(_objects(raw.get("mounts"), f"{where}.mounts"))
        ),
        hooks=tuple(
            _hook(d, f"{where}.hooks[{k}]")
            for k, d in enumerate(_objects(raw.get("hooks"), f"{where}.hooks"))
        ),
    )


def parse_spec(path: Path, raw: object) -> _Spec:
    where = str(path)
    if not isinstance(raw, Mapping):
        raise CdiError(f"{where}: not an object")
    version = raw.get("cdiVersion")
    if version not in KNOWN_CDI_VERSIONS:
        raise CdiError(f"{where}: unknown cdiVersion {version!r}")
    kind = raw.get("kind")
    if not isinstance(kind, str):
        raise CdiError(f"{where}: kind missing")
    parse_qualified_name(f"{kind}=x")
    devices: dict[str, EditList] = {}
    for k, device in enumerate(_objects(raw.get("devices"), f"{where}.devices")):
        name = device.get("name")
        if not isinstance(name, str) or not _NAME_RE.match(name):
            raise CdiError(f"{where}.devices[{k}].name: invalid device name {name!r}")
        if name in devices:
            raise CdiError(f"{where}.devices[{k}].name: {name!r} defined twice")
        edits = device.get("containerEdits")
        if not isinstance(edits, Mapping) or not edits:
            raise CdiError(f"{where}.devices[{k}].containerEdits: a device needs container edits")
        devices[name] = parse_edits(edits, f"{where}.devices[{k}].containerEdits")
    if not devices:
        raise CdiError(f"{where}: no devices")
    return _Spec(path=path, kind=kind, edits=parse_edits(raw.get("containerEdits"), where), devices=devices)


def _read(path: Path) -> object:
    text = path.read_text(encoding="utf-8")
    return json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)


class CdiRegistry:
    """The spec directories, lowest priority first (a runtime's default: /etc/cdi, then /var/run/cdi). Specs
    are re-read at every injection, as the CDI cache refreshes on file changes."""

    def __init__(self, *, spec_dirs: Sequence[Path]) -> None:
        self._spec_dirs = tuple(spec_dirs)

    def _index(self) -> tuple[dict[str, tuple[_Spec, EditList]], list[str]]:
        devices: dict[str, tuple[_Spec, EditList]] = {}
        problems: list[str] = []
        for directory in self._spec_dirs:
            here: dict[str, tuple[_Spec, EditList]] = {}
            conflicts: set[str] = set()
            paths = sorted(directory.glob("*.json")) + sorted(directory.glob("*.yaml"))
            for path in paths:
                try:
                    spec = parse_spec(path, _read(path))
                except (OSError, ValueError, yaml.YAMLError, CdiError) as e:
                    # The runtime skips a broken spec and remembers why; its devices become unresolvable.
                    problems.append(f"{path}: {e}")
                    continue
                for name, edits in spec.devices.items():
                    qualified = f"{spec.kind}={name}"
                    if qualified in here:
                        conflicts.add(qualified)
                        problems.append(f"{qualified} defined in {here[qualified][0].path} and {path}")
                    here[qualified] = (spec, edits)
            for qualified in conflicts:
                del here[qualified]
            devices.update(here)  # a later directory overrides an earlier one
        return devices, problems

    def inject(self, device_ids: Sequence[str]) -> ContainerConfig:
        """The container config after injecting `device_ids`; raises CdiError naming every unresolvable id,
        which is what fails the container's creation."""
        wanted = list(dict.fromkeys(device_ids))
        for device in wanted:
            parse_qualified_name(device)
        index, problems = self._index()
        missing = [d for d in wanted if d not in index]
        if missing:
            detail = f" (spec problems: {'; '.join(problems)})" if problems else ""
            raise CdiError(f"unresolvable CDI devices {', '.join(missing)}{detail}")
        merged = EditList()
        seen_specs: set[Path] = set()
        for device in wanted:
            spec, edits = index[device]
            if spec.path not in seen_specs:
                seen_specs.add(spec.path)
                merged = merged.then(spec.edits)
            merged = merged.then(edits)
        config = apply_edits(wanted, merged)
        check_mount_sources(config)
        return config


def check_mount_sources(config: ContainerConfig) -> None:
    """A bind mount of a host path that does not exist fails at container creation (runc's error)."""
    for mount in config.mounts:
        is_bind = mount.type in ("", "bind") or "bind" in mount.options or "rbind" in mount.options
        if is_bind and not os.path.exists(mount.host_path):
            raise CdiError(
                f"mount source {mount.host_path} for {mount.container_path} does not exist on the host"
            )
