"""Per-node settings: which families a node offers and how many claims may share one GPU.

A settings file is versioned like every Tessera file:

    apiVersion: resource.tessera.dev/v1
    kind: NodeSettings
    families: {gpu: true, vgpu: true, mig: false}   # each optional, default true
    vgpuShares: 10                                  # optional, 1..128
    nodeName: node-a                                # optional; usually from the NODE_NAME env
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field

from dra_driver import families as registry
from dra_driver.errors import ConfigError
from dra_driver.names import CONFIG_API_VERSION, NODE_SETTINGS_KIND, Family

DEFAULT_VGPU_SHARES = 10  # HAMi's default split count
MAX_VGPU_SHARES = 128
_DNS_SUBDOMAIN = re.compile(r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*$")


def check_node_name(name: str, where: str = "nodeName") -> str:
    if not name or len(name) > 253 or not _DNS_SUBDOMAIN.match(name):
        raise ConfigError(
            f"{where}: {name!r} is not a valid node name "
            "(a DNS subdomain: lowercase letters, digits, '-', '.')"
        )
    return name


@dataclass(frozen=True, slots=True)
class NodeSettings:
    node_name: str
    families: frozenset[Family] = field(default_factory=lambda: frozenset(registry.names()))
    vgpu_shares: int = DEFAULT_VGPU_SHARES

    def __post_init__(self) -> None:
        check_node_name(self.node_name)
        if not isinstance(self.vgpu_shares, int) or isinstance(self.vgpu_shares, bool):
            raise ConfigError(f"vgpuShares: expected an integer, got {self.vgpu_shares!r}")
        if not 1 <= self.vgpu_shares <= MAX_VGPU_SHARES:
            raise ConfigError(f"vgpuShares: {self.vgpu_shares} is out of range; use 1..{MAX_VGPU_SHARES}")
        bad = sorted(f for f in self.families if registry.find(f) is None)
        if bad:
            raise ConfigError(f"families: {bad[0]!r} is not one of {', '.join(registry.names())}")

    def offers(self, family: Family) -> bool:
        return family in self.families

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], *, node_name: str | None = None) -> NodeSettings:
        """Strictly decode a settings document; `node_name` (from the environment) wins over the file's."""
        unknown = sorted(set(data) - {"apiVersion", "kind", "families", "vgpuShares", "nodeName"})
        if unknown:
            raise ConfigError(
                f"{unknown[0]}: unknown NodeSettings field (allowed: families, vgpuShares, nodeName)"
            )
        if data.get("apiVersion") != CONFIG_API_VERSION or data.get("kind") != NODE_SETTINGS_KIND:
            raise ConfigError(
                f"apiVersion/kind: expected {CONFIG_API_VERSION}/{NODE_SETTINGS_KIND}, "
                f"got {data.get('apiVersion')!r}/{data.get('kind')!r}"
            )
        families = set(registry.names())
        raw_families = data.get("families", {})
        if not isinstance(raw_families, Mapping):
            raise ConfigError("families: expected a mapping like {gpu: true, vgpu: false, mig: true}")
        for key, enabled in raw_families.items():
            if not isinstance(key, str) or registry.find(key) is None:
                raise ConfigError(f"families.{key}: unknown family; use {', '.join(registry.names())}")
            if not isinstance(enabled, bool):
                raise ConfigError(f"families.{key}: expected true or false, got {enabled!r}")
            if not enabled:
                families.discard(Family(key))
        shares = data.get("vgpuShares", DEFAULT_VGPU_SHARES)
        if not isinstance(shares, int) or isinstance(shares, bool):
            raise ConfigError(f"vgpuShares: expected an integer, got {shares!r}")
        file_name = data.get("nodeName")
        if file_name is not None and not isinstance(file_name, str):
            raise ConfigError(f"nodeName: expected a string, got {file_name!r}")
        name = node_name or file_name
        if not name:
            raise ConfigError("nodeName: not set; set NODE_NAME in the environment or nodeName in the file")
        return cls(node_name=name, families=frozenset(families), vgpu_shares=shares)
