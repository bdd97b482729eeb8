"""The host parts of the device families: every module here that defines `make(ctx) -> FamilyHost` serves the
family of the same name (dra_driver/core/families/<name>.py); families without a module create nothing on the
host.
"""

from __future__ import annotations

import importlib
import pkgutil
from collections.abc import Callable, Iterator
from typing import Any

from dra_driver.core import families
from dra_driver.values.names import Family
from kubelet_plugin.hosts.base import AnyHost, FamilyHost, HostContext

_SUPPORT = {"base"}


def _makers() -> dict[Family, Callable[[HostContext], AnyHost]]:
    found: dict[Family, Callable[[HostContext], AnyHost]] = {}
    for info in pkgutil.iter_modules(__path__):
        if info.name in _SUPPORT or info.name.startswith("_"):
            continue
        if families.find(info.name) is None:
            raise TypeError(f"kubelet_plugin.hosts.{info.name} serves no family of that name")
        module = importlib.import_module(f"{__name__}.{info.name}")
        found[Family(info.name)] = module.make
    return found


class Hosts:
    """One host part per family, in the families' order."""

    def __init__(self, ctx: HostContext) -> None:
        makers = _makers()
        self._parts = {
            f.name: makers[f.name](ctx) if f.name in makers else FamilyHost[Any, Any, Any](f.name)
            for f in families.FAMILIES
        }

    def __getitem__(self, family: Family) -> AnyHost:
        return self._parts[family]

    def __iter__(self) -> Iterator[AnyHost]:
        return iter(self._parts.values())

    def close(self) -> None:
        for part in self:
            part.close()
