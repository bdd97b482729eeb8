"""Per-node settings: which families a node offers, in which order the devices are published, and the
settings the families declare themselves (`DeviceFamily.settings`: `sharesPerGpu`, MIG's `migProfiles`).

A settings file is versioned like every Tessera file:

    apiVersion: resource.tessera.dev/v1
    kind: NodeSettings
    families: {gpu: true, vgpu: true, mig: false}   # each optional, default true
    sharesPerGpu: 10                                # vgpu's and MPS's; optional, 1..64 (a GPU's view);
                                                    #   `vgpuShares`, its former name, is read too
    migProfiles: [1g.10gb, 3g.40gb, 7g.80gb]        # MIG's; optional, default every profile the GPU has
    deviceOrder: fragmentation-aware                # optional; or by-gpu (the order before issue #12)
    numaNodeForm: scalar                            # optional; or list (needs DRAListTypeAttributes)
    nodeName: node-a                                # optional; usually from the NODE_NAME env
    schedulerVersion: v1.36.1                       # optional; the Kubernetes release whose allocator a
                                                    #   scheduler other than kube-scheduler vendors

`migProfiles` only thins what is published (fewer devices per node, see docs/performance.md): a profile a
GPU does not have is ignored, so one list can serve a mixed fleet (`1g.5gb` on an A100-40GB, `1g.10gb` on an
H100). An administrator's MIG instances are published whatever their profile.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import TypeVar

from dra_driver.core import families as registry
from dra_driver.core.cluster_features import release_version
from dra_driver.core.device_order import DeviceOrder
from dra_driver.core.families.base import FamilySettings, NodeSetting, decoded_settings
from dra_driver.core.families.published import NumaForm
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import CONFIG_API_VERSION, NODE_SETTINGS_KIND, Family

T = TypeVar("T")
C = TypeVar("C", bound=StrEnum)
_OWN_FIELDS = ("families", "deviceOrder", "numaNodeForm", "nodeName", "schedulerVersion")
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
    device_order: DeviceOrder = DeviceOrder.FRAGMENTATION_AWARE
    numa_node_form: NumaForm = NumaForm.SCALAR
    # the families' own fields, decoded by the NodeSetting that declares each (`family_settings` builds it)
    family: FamilySettings = field(default_factory=FamilySettings)
    # The release whose DRA allocator places this node's claims when a scheduler other than the cluster's
    # kube-scheduler does (Volcano vendors one, docs/volcano.md); None: the API server's stands for it.
    scheduler_version: str | None = None

    def __post_init__(self) -> None:
        check_node_name(self.node_name)
        bad = sorted(f for f in self.families if registry.find(f) is None)
        if bad:
            raise ConfigError(f"families: {bad[0]!r} is not one of {', '.join(registry.names())}")
        if not isinstance(self.device_order, DeviceOrder):
            raise ConfigError(f"deviceOrder: {self.device_order!r} is not one of {_one_of(DeviceOrder)}")
        if not isinstance(self.numa_node_form, NumaForm):
            raise ConfigError(f"numaNodeForm: {self.numa_node_form!r} is not one of {_one_of(NumaForm)}")
        if self.scheduler_version is not None and (
            not isinstance(self.scheduler_version, str) or release_version(self.scheduler_version) is None
        ):
            raise ConfigError(
                f"schedulerVersion: {self.scheduler_version!r} is not a Kubernetes release like v1.36.1 (the "
                "k8s.io/kubernetes version the scheduler vendors; leave it out for kube-scheduler)"
            )

    def offers(self, family: Family) -> bool:
        return family in self.families

    def setting(self, setting: NodeSetting[T]) -> T:
        return self.family.get(setting)

    def check_fits(self, inventory: Inventory) -> None:
        """Refuse settings the node cannot honour (`NodeSetting.fits`: memoryOversubscription beyond what its
        host memory backs), for the families it offers; ConfigError naming the field and the fix."""
        for family in registry.FAMILIES:
            if not self.offers(family.name):
                continue
            for s in family.settings:
                if s.fits is not None:
                    s.fits(inventory, self.setting(s))

    @classmethod
    def from_mapping(cls, data: Mapping[str, object], *, node_name: str | None = None) -> NodeSettings:
        """Strictly decode a settings document; `node_name` (from the environment) wins over the file's."""
        declared = registry.node_settings()
        allowed = (*_OWN_FIELDS, *declared)
        unknown = sorted(set(data) - {"apiVersion", "kind", *allowed})
        if unknown:
            raise ConfigError(f"{unknown[0]}: unknown NodeSettings field (allowed: {', '.join(allowed)})")
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
        file_name = data.get("nodeName")
        if file_name is not None and not isinstance(file_name, str):
            raise ConfigError(f"nodeName: expected a string, got {file_name!r}")
        name = node_name or file_name
        if not name:
            raise ConfigError("nodeName: not set; set NODE_NAME in the environment or nodeName in the file")
        return cls(
            node_name=name,
            families=frozenset(families),
            device_order=_choice(
                "deviceOrder", DeviceOrder, data.get("deviceOrder", DeviceOrder.FRAGMENTATION_AWARE)
            ),
            numa_node_form=_choice("numaNodeForm", NumaForm, data.get("numaNodeForm", NumaForm.SCALAR)),
            family=decoded_settings(declared, {k: v for k, v in data.items() if k in declared}),
            scheduler_version=_optional_text(data.get("schedulerVersion")),
        )


def _optional_text(raw: object) -> str | None:
    if raw is None or raw == "":
        return None
    if not isinstance(raw, str):
        # YAML reads an unquoted 1.30 as the float 1.3: only a string says which release was meant
        raise ConfigError(f"schedulerVersion: {raw!r} is not a Kubernetes release like v1.36.1 (quote it)")
    return raw


def _one_of(kind: type[C]) -> str:
    return ", ".join(c.value for c in kind)


def _choice(key: str, kind: type[C], raw: object) -> C:
    try:
        return kind(str(raw))
    except ValueError as e:
        raise ConfigError(f"{key}: {raw!r} is not one of {_one_of(kind)}") from e


def family_settings(**raw: object) -> FamilySettings:
    """The families' settings from their file keys (`sharesPerGpu=4`), decoded strictly as the file is."""
    return decoded_settings(registry.node_settings(), raw)
