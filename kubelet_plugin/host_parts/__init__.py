"""The host parts of the device families: every module here that defines `make(ctx) -> FamilyHost` serves the
family of the same name (dra_driver/core/families/<name>.py), and may define `OPTIONS`, the command-line flags
it owns (`HostOption`); families without a module create nothing on the host.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Iterator
from types import ModuleType
from typing import Any

from dra_driver.core import families
from dra_driver.vocabulary.names import Family
from kubelet_plugin.host_parts.base import AnyHost, FamilyHost, HostContext, HostOption

_SUPPORT = {"base"}


def _modules() -> dict[Family, ModuleType]:
    found: dict[Family, ModuleType] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _SUPPORT or info.name.startswith("_"):
            continue
        if families.find(info.name) is None:
            raise TypeError(f"kubelet_plugin.host_parts.{info.name} serves no family of that name")
        found[Family(info.name)] = importlib.import_module(f"{__name__}.{info.name}")
    return found


def options() -> tuple[HostOption, ...]:
    """Every flag the host parts own, in the families' order."""
    modules = _modules()
    return tuple(
        o for f in families.FAMILIES if f.name in modules for o in getattr(modules[f.name], "OPTIONS", ())
    )


class Hosts:
    """One host part per family, in the families' order."""

    def __init__(self, ctx: HostContext) -> None:
        modules = _modules()
        self._parts: dict[Family, AnyHost] = {
            f.name: modules[f.name].make(ctx) if f.name in modules else FamilyHost[Any, Any, Any](f.name)
            for f in families.FAMILIES
        }

    def __getitem__(self, family: Family) -> AnyHost:
        return self._parts[family]

    def __iter__(self) -> Iterator[AnyHost]:
        return iter(self._parts.values())

    def close(self) -> None:
        for part in self:
            part.close()
