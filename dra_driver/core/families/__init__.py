"""The registry of device families: every module of this package that defines `FAMILY` is one (pure).

Adding a family is adding a module here (and its host part in kubelet_plugin/host_parts when it creates
something on the node); nothing else lists families. docs/architecture.md, "The family seam".
"""

from __future__ import annotations

import importlib
import pkgutil
from dataclasses import dataclass
from typing import Any

from dra_driver.core.config_schema import ConfigKind
from dra_driver.core.families.base import AnyPlanned, NodeSetting
from dra_driver.core.families.protocol import (
    AnyFamily,
    ClaimWide,
    DeviceFamily,
    LibraryLimited,
    Placing,
    Recording,
    TimeSliced,
)
from dra_driver.libtessera.limits_file import LibraryLimits
from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.names import Family, split_device_name

# modules of this package that are not families
_SUPPORT = {"base", "protocol", "published", "capacity", "oversubscription"}


def _discover() -> tuple[AnyFamily, ...]:
    found = []
    for info in pkgutil.iter_modules(__path__):
        if info.name in _SUPPORT or info.name.startswith("_"):
            continue
        module = importlib.import_module(f"{__name__}.{info.name}")
        family = getattr(module, "FAMILY", None)
        if not isinstance(family, DeviceFamily):
            raise TypeError(f"{module.__name__} defines no FAMILY (a DeviceFamily)")
        found.append(family)
    found.sort(key=lambda f: (f.rank, f.name))
    names = [f.name for f in found]
    if len(set(names)) != len(names):
        raise TypeError(f"two families share a name: {names}")
    return tuple(found)


FAMILIES: tuple[AnyFamily, ...] = _discover()
_BY_NAME = {f.name: f for f in FAMILIES}
_BY_KIND = {f.config.kind: f for f in FAMILIES}


def names() -> tuple[Family, ...]:
    return tuple(f.name for f in FAMILIES)


def family(name: str) -> AnyFamily:
    """The family of that name; KeyError for none (names come from our own records and settings)."""
    return _BY_NAME[Family(name)]


def find(name: str) -> AnyFamily | None:
    return _BY_NAME.get(Family(name))


def by_config_kind(kind: str) -> AnyFamily | None:
    return _BY_KIND.get(kind)


def config_kinds() -> tuple[ConfigKind, ...]:
    return tuple(f.config for f in FAMILIES)


# The families that opt into a capability (protocol.py), in the families' order; found once, as FAMILIES is.
_RECORDING = tuple(f for f in FAMILIES if isinstance(f, Recording))
_PLACING = tuple(f for f in FAMILIES if isinstance(f, Placing))
_TIME_SLICED = tuple(f for f in FAMILIES if isinstance(f, TimeSliced))
_CLAIM_WIDE = tuple(f for f in FAMILIES if isinstance(f, ClaimWide))


def recording() -> tuple[Recording[Any, Any, Any], ...]:
    return _RECORDING


def placing() -> tuple[Placing[Any, Any, Any], ...]:
    return _PLACING


def time_sliced() -> tuple[TimeSliced[Any, Any, Any], ...]:
    return _TIME_SLICED


def claim_wide() -> tuple[ClaimWide[Any, Any, Any], ...]:
    return _CLAIM_WIDE


def library_limits(d: AnyPlanned) -> LibraryLimits | None:
    """What the interception library enforces for a planned device; None: its family does not use it."""
    f = family(d.family)
    return f.library(d) if isinstance(f, LibraryLimited) else None


def node_settings() -> dict[str, NodeSetting[Any]]:
    """Every NodeSettings field a family declares, by each key it is read from (a renamed setting's former
    keys too); TypeError when two families declare one key."""
    found: dict[str, NodeSetting[Any]] = {}
    for f in FAMILIES:
        for s in f.settings:
            for key in s.keys:
                if found.get(key, s) is not s:
                    raise TypeError(f"two families declare the node setting {key}")
                found[key] = s
    return found


@dataclass(frozen=True, slots=True)
class ParsedDevice:
    family: AnyFamily
    index: int
    detail: object  # the family's reading of its part of the name


def parse_device_name(name: str) -> ParsedDevice:
    """`gpu-3-vgpu` → (vgpu, 3, ...); InvalidNameError for a name no family publishes."""
    index, part = split_device_name(name)
    for f in FAMILIES:
        detail = f.parse_name(part)
        if detail is not None:
            return ParsedDevice(f, index, detail)
    raise InvalidNameError(
        f"device name {excerpt(name)} is not a Tessera device: gpu-<i> followed by nothing (a whole GPU) or "
        f"a family's part ({', '.join(n for n in names())})"
    )
