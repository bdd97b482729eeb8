"""The registry of device families: every module of this package that defines `FAMILY` is one (pure).

Adding a family is adding a module here (and its host part in kubelet_plugin/hosts when it creates something
on the node); nothing else lists families. docs/architecture.md, "The family seam".
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from dataclasses import dataclass

from dra_driver.core.config_schema import ConfigKind
from dra_driver.core.families.base import DeviceFamily
from dra_driver.values.errors import InvalidNameError
from dra_driver.values.excerpt import excerpt
from dra_driver.values.names import Family, split_device_name

_SUPPORT = {"base", "published", "capacity"}  # modules of this package that are not families


def _discover() -> tuple[DeviceFamily, ...]:
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


FAMILIES: tuple[DeviceFamily, ...] = _discover()
_BY_NAME = {f.name: f for f in FAMILIES}
_BY_KIND = {f.config.kind: f for f in FAMILIES}


def names() -> tuple[Family, ...]:
    return tuple(f.name for f in FAMILIES)


def family(name: str) -> DeviceFamily:
    """The family of that name; KeyError for none (names come from our own records and settings)."""
    return _BY_NAME[Family(name)]


def find(name: str) -> DeviceFamily | None:
    return _BY_NAME.get(Family(name))


def by_config_kind(kind: str) -> DeviceFamily | None:
    return _BY_KIND.get(kind)


def config_kinds() -> tuple[ConfigKind, ...]:
    return tuple(f.config for f in FAMILIES)


def with_records() -> Iterator[DeviceFamily]:
    return (f for f in FAMILIES if f.record_key is not None)


@dataclass(frozen=True, slots=True)
class ParsedDevice:
    family: DeviceFamily
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
