"""What the family seam passes around (pure): a GPU as offered to the families, a node setting a family
declares, an allocated device before and after planning, the records the node keeps of a family
(`NodeRecords`), which memory slices of its GPU a device occupies (`SliceOccupancy`, for exclusivity) and how
much of its GPU a prepared device was allotted (`Allotment`, for metrics and usage). The protocol itself is
`protocol.py`. docs/architecture.md, "The family seam".
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Generic, Never, cast

from typing_extensions import TypeVar

from dra_driver.libtessera.limits_file import LibraryLimits
from dra_driver.vocabulary.errors import ClaimError, ConfigError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import Gpu, Inventory, MigInstance
from dra_driver.vocabulary.names import DeviceName, Family, GpuUUID

Json = dict[str, Any]  # a resource.k8s.io/v1 object in wire form

# A family's own types (protocol.py): its config value, its reading of a device name's part, its plan of a
# device, its checkpoint record, and what its host part makes for a device. A family without records or host
# part leaves those `Never`; one whose names carry nothing reads them as `Unnamed`.
Unnamed = tuple[()]
T = TypeVar("T")
ConfigT = TypeVar("ConfigT")
DetailT = TypeVar("DetailT", default=Unnamed)
SpecT = TypeVar("SpecT", default=None)
RecordT = TypeVar("RecordT", default=Never)
MadeT = TypeVar("MadeT", default=Never)


# ---- node settings -----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class NodeSetting(Generic[T]):
    """A field of the NodeSettings file that a family declares and reads (`sharesPerGpu`, `migProfiles`): its
    key, its value when absent, and a strict decoder raising ConfigError whose message starts with the key."""

    key: str
    default: T
    meaning: str
    decode: Callable[[object], T]
    # the value's JSON Schema: the chart's values.schema.json checks nodeGroups[].<key> with it (generated)
    schema: Mapping[str, Any] = field(default_factory=dict)
    # keys the setting had before it was renamed: still read, as the same setting (`vgpuShares`)
    former_keys: tuple[str, ...] = ()
    # what the value asks of the node itself, checked by the node daemon at start against its GPUs and host
    # (`NodeSettings.check_fits`): raises ConfigError naming the key and the fix; None: any value fits
    fits: Callable[[Inventory, T], None] | None = None

    @property
    def keys(self) -> tuple[str, ...]:
        """Every key it is read from, the preferred one first."""
        return (self.key, *self.former_keys)

    def decode_as(self, key: str, raw: object) -> T:
        """`raw` given under `key` (one of `keys`), decoded; the error names the key as it was given."""
        try:
            return self.decode(raw)
        except ConfigError as e:
            said = str(e)
            if key != self.key and said.startswith(self.key):
                raise ConfigError(key + said.removeprefix(self.key)) from e
            raise


@dataclass(frozen=True, slots=True)
class FamilySettings:
    """The families' settings of one node, by key, decoded; absent keys read as their default."""

    values: Mapping[str, object] = field(default_factory=dict)

    def get(self, setting: NodeSetting[T]) -> T:
        if setting.key not in self.values:
            return setting.default
        # every value was decoded by the setting of its key (settings.py), so it is the setting's type
        return cast(T, self.values[setting.key])


def decoded_settings(declared: Mapping[str, NodeSetting[Any]], raw: Mapping[str, object]) -> FamilySettings:
    """Decode the given keys with the settings that declare them (`declared`: by every key each is read
    from); ConfigError for a key none declares, or for two keys of one setting given different values."""
    given: dict[str, tuple[str, object]] = {}  # the setting's key: (the key given, its value decoded)
    for key, value in raw.items():
        setting = declared.get(key)
        if setting is None:
            raise ConfigError(f"{key}: no family declares this node setting (known: {', '.join(declared)})")
        decoded = setting.decode_as(key, value)
        if setting.key in given and given[setting.key][1] != decoded:
            first = given[setting.key][0]
            raise ConfigError(
                f"{first}, {key}: two names of one setting with different values "
                f"({excerpt(raw[first])}, {excerpt(value)}); give {setting.key} only"
            )
        given[setting.key] = (key, decoded)
    # a default given explicitly is the same node as one left out
    return FamilySettings({k: v for k, (_, v) in given.items() if v != declared[k].default})


NO_SETTINGS = FamilySettings()  # a node that gives none: every setting at its default


@dataclass(frozen=True, slots=True)
class ClassVariant:
    """A DeviceClass a family ships besides its own (`<family>-<name>.tessera.dev`): the family's devices
    that also meet `selects` (a CEL condition), with `config` (fields of the family's config kind) set for
    every claim of the class, as an administrator's class would."""

    name: str
    meaning: str
    selects: str
    config: Mapping[str, object]


# ---- offering ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuOffer:
    """One GPU as the slice builder hands it to each family."""

    gpu: Gpu
    inventory: Inventory
    settings: FamilySettings  # the node's family settings (a family reads its own through its NodeSetting)
    admin: tuple[MigInstance, ...]  # live MIG instances no Tessera claim holds: an administrator's
    counters: (
        Mapping[str, int] | None
    )  # the GPU's counter totals; None: degraded (whole GPUs only, no counters)

    def setting(self, setting: NodeSetting[T]) -> T:
        return self.settings.get(setting)

    @property
    def shareable(self) -> bool:
        """Whether the GPU can be handed out whole or sliced in software: no administrator's instances on it,
        and MIG mode off or switchable off without a reset."""
        gpu = self.gpu
        return not self.admin and (not gpu.mig_enabled or gpu.architecture.can_toggle_mig_without_reset)


# ---- planning ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allocated(Generic[ConfigT, DetailT]):
    """One device of ours in a claim's allocation, with what planning knows about it."""

    request: str
    device: DeviceName
    detail: DetailT  # the family's reading of its part of the device name (`parse_name`)
    gpu: Gpu
    share_id: str | None
    consumed: Mapping[str, str]  # consumedCapacity ({} when the device has none)
    config: ConfigT  # the family's config, merged for this device's request
    # the node's family settings, as its slices were published with them (vgpu: memoryOversubscription)
    settings: FamilySettings = field(default_factory=FamilySettings)

    def planned(self, family: Family, spec: SpecT) -> PlannedDevice[ConfigT, SpecT]:
        """This device as `family` plans it, with the family's own plan in `spec`."""
        return PlannedDevice(
            request=self.request,
            device=self.device,
            family=family,
            gpu_index=self.gpu.index,
            gpu_uuid=self.gpu.uuid,
            share_id=self.share_id,
            config=self.config,
            spec=spec,
        )


@dataclass(frozen=True, slots=True)
class NodeRecords(Generic[RecordT]):
    """The records the node's checkpoint already keeps for a family, so planning never books a thing twice."""

    claim: tuple[RecordT, ...] = ()  # records of the claim being planned (it is prepared again)
    others: tuple[RecordT, ...] = ()  # every other claim's, and those planned earlier in the same call


@dataclass(frozen=True, slots=True)
class PlannedDevice(Generic[ConfigT, SpecT]):
    request: str
    device: DeviceName
    family: Family
    gpu_index: int
    gpu_uuid: GpuUUID
    share_id: str | None
    config: ConfigT  # the family's config value
    spec: SpecT  # the family's plan for it (limits, a MIG placement, ...; None for nothing)
    # What the interception library enforces for it, asked of its family once, when the claim is planned
    # (dra_driver.core.allocation); None: its family does not use the library.
    library_limits: LibraryLimits | None = None


AnyPlanned = PlannedDevice[Any, Any]  # a device of any family, as the callers hold them


@dataclass(frozen=True, slots=True)
class Allotment:
    """How much of its GPU a prepared device was allotted (memory, a share of the SMs, its MIG instance), as
    metrics and usage report it; which of the GPU's slices it occupies is its `SliceOccupancy`."""

    memory_bytes: int
    cores_ratio: float  # share of the GPU's SMs (1.0: all of them)
    mig_profile: str | None = None
    mig_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class SliceOccupancy:
    """Which of its GPU's memory slices one allocated device occupies, for the prepare side's own exclusivity
    check (dra_driver/core/exclusivity.py), and whether other devices of its family may occupy them at once
    (a multi-allocatable device: vgpu, MPS). How much it was allotted is its `Allotment`."""

    family: Family
    slices: frozenset[int]
    shared: bool = False
    what: str = "a whole GPU"  # how an error names it: "a vGPU share", "MIG 1g.10gb at slice 3"

    def excludes(self, other: SliceOccupancy) -> bool:
        if self.shared and other.shared and self.family == other.family:
            return False
        return bool(self.slices & other.slices)


def all_slices(gpu: Gpu) -> frozenset[int]:
    """Every memory slice of the GPU (one for a GPU without MIG, which is then one indivisible slice)."""
    return frozenset(range(max(gpu.memory_slice_count, 1)))


def not_in_mig_mode(d: Allocated[Any, Any], what: str) -> None:
    """A GPU an administrator put in MIG mode cannot be handed out whole or sliced in software."""
    if d.gpu.mig_enabled:
        raise ClaimError(
            f"device {d.device}: GPU {d.gpu.index} is in MIG mode, so it cannot be used as {what}"
        )
