"""What a container runtime makes of CDI container edits: the container's environment, mounts, device nodes
and hooks after every injected device was applied, in the order a runtime applies them."""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass, field

from e2e.kubelet_standin.errors import CdiError


@dataclass(frozen=True, slots=True)
class DeviceNodeEdit:
    path: str
    host_path: str
    type: str
    major: int
    minor: int
    permissions: str = ""
    file_mode: int | None = None
    uid: int | None = None
    gid: int | None = None


@dataclass(frozen=True, slots=True)
class MountEdit:
    host_path: str
    container_path: str
    type: str = ""
    options: tuple[str, ...] = ()

    @property
    def read_only(self) -> bool:
        return "ro" in self.options


@dataclass(frozen=True, slots=True)
class HookEdit:
    hook_name: str
    path: str
    args: tuple[str, ...] = ()
    env: tuple[str, ...] = ()
    timeout: int | None = None


@dataclass(frozen=True, slots=True)
class EditList:
    """The container edits of one spec or one device, in file order (env as `KEY=VALUE` strings)."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNodeEdit, ...] = ()
    mounts: tuple[MountEdit, ...] = ()
    hooks: tuple[HookEdit, ...] = ()

    def then(self, other: EditList) -> EditList:
        return EditList(
            env=self.env + other.env,
            device_nodes=self.device_nodes + other.device_nodes,
            mounts=self.mounts + other.mounts,
            hooks=self.hooks + other.hooks,
        )


@dataclass(frozen=True, slots=True)
class ContainerConfig:
    """A container as created: its CDI devices and the resulting env, mounts, device nodes and hooks."""

    cdi_devices: tuple[str, ...] = ()
    env: tuple[tuple[str, str], ...] = ()
    mounts: tuple[MountEdit, ...] = ()
    device_nodes: tuple[DeviceNodeEdit, ...] = ()
    hooks: tuple[HookEdit, ...] = ()
    error: str = ""  # set when the runtime refused to create the container

    def env_map(self) -> dict[str, str]:
        return dict(self.env)

    def mount_at(self, container_path: str) -> MountEdit | None:
        return next((m for m in self.mounts if m.container_path == container_path), None)

    def device_paths(self) -> set[str]:
        return {d.path for d in self.device_nodes}


@dataclass(slots=True)
class _Builder:
    env: dict[str, str] = field(default_factory=dict)
    mounts: dict[str, MountEdit] = field(default_factory=dict)
    device_nodes: dict[str, DeviceNodeEdit] = field(default_factory=dict)
    hooks: list[HookEdit] = field(default_factory=list)


def _split_env(entry: str) -> tuple[str, str]:
    key, sep, value = entry.partition("=")
    if not sep or not key:
        raise CdiError(f"env entry {entry!r} is not KEY=VALUE")
    return key, value


def apply_edits(cdi_devices: Iterable[str], edits: EditList) -> ContainerConfig:
    """Applies merged edits as the CDI library does to an OCI spec: an env variable set twice keeps the later
    value, a mount replaces an earlier mount at the same container path, a device node replaces an earlier
    one at the same path, hooks accumulate. Mounts end sorted by path depth, so parents mount first."""
    built = _Builder()
    for entry in edits.env:
        key, value = _split_env(entry)
        built.env.pop(key, None)
        built.env[key] = value
    for node in edits.device_nodes:
        built.device_nodes.pop(node.path, None)
        built.device_nodes[node.path] = node
    for mount in edits.mounts:
        built.mounts.pop(mount.container_path, None)
        built.mounts[mount.container_path] = mount
    built.hooks.extend(edits.hooks)
    mounts = sorted(built.mounts.values(), key=lambda m: len([p for p in m.container_path.split("/") if p]))
    return ContainerConfig(
        cdi_devices=tuple(cdi_devices),
        env=tuple(built.env.items()),
        mounts=tuple(mounts),
        device_nodes=tuple(built.device_nodes.values()),
        hooks=tuple(built.hooks),
    )
