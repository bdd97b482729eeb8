"""What a container gets of a claim: character devices, bind mounts and environment variables (pure values).

The families say what each device needs in these words (dra_driver/core/families); `cdi/spec.py` writes them
as a CDI spec, which the container runtime applies. The inventory's GPUs, control devices and MIG capability
devices are `DeviceNode`s too: a container gets a host device at the path the host has it.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import excerpt


@dataclass(frozen=True, slots=True)
class DeviceNode:
    """A character device, at the same path on the host and in a container; major/minor let the runtime
    skip stat() on the host."""

    path: str
    major: int
    minor: int


@dataclass(frozen=True, slots=True)
class Mount:
    """A bind mount of a host path into the container."""

    host_path: str
    container_path: str
    options: tuple[str, ...] = ()


@dataclass(frozen=True, slots=True)
class ContainerEdits:
    """Changes to a container: variables (`NAME=value`), device nodes and mounts, applied in order."""

    env: tuple[str, ...] = ()
    device_nodes: tuple[DeviceNode, ...] = ()
    mounts: tuple[Mount, ...] = ()

    def __post_init__(self) -> None:
        for entry in self.env:
            if "=" not in entry or entry.startswith("="):
                raise ConfigError(f"container environment: {excerpt(entry)} is not NAME=value")

    @property
    def empty(self) -> bool:
        return not (self.env or self.device_nodes or self.mounts)
