"""The MIG family: hardware partitions created on demand (pure). Devices `gpu-<i>-mig-<profile>-<start>`,
DeviceClasses `mig.tessera.dev` and one per profile, config kind `MigConfig`.

Every placement a GPU allows is published (it consumes the GPU's memory-slice and engine counters, so the
scheduler never allocates two overlapping ones, nor a placement next to a whole GPU or a vgpu). Tessera
creates the instance at prepare time and destroys it at unprepare; it owns an instance exactly when a
checkpoint record holds its placement. An administrator's live instances are published as static devices and
used as they are. Hopper and newer switch MIG mode themselves; Ampere needs an administrator to (a reset).
"""

from __future__ import annotations

import collections
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dra_driver.core.config_schema import ConfigKind
from dra_driver.core.families.base import (
    Allocated,
    Allotment,
    GpuOffer,
    Json,
    NodeRecords,
    NodeSetting,
    PlannedDevice,
    SliceOccupancy,
    all_slices,
)
from dra_driver.core.families.protocol import (
    DeviceFamily,
    NamedVisible,
    Ordered,
    OrderKey,
    Placing,
)
from dra_driver.core.families.published import attribute, consumes, gpu_attributes, profile_counters, string
from dra_driver.core.profiles import PRODUCTS
from dra_driver.libtessera.limits_file import GpuLimitLine
from dra_driver.vocabulary.container import ContainerEdits
from dra_driver.vocabulary.errors import (
    ClaimError,
    ConfigError,
    InvalidNameError,
    MigError,
    PlacementTakenError,
)
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import Gpu, MigInstance, MigProfile, Placement
from dra_driver.vocabulary.names import (
    Attr,
    Cap,
    DeviceName,
    Family,
    GpuUUID,
    gpu_device_name,
    memory_slice_counter,
    profile_class_name,
    qualified,
)

NAME = Family("mig")

# ASCII digits (re.ASCII), matched whole (fullmatch: `$` alone takes a trailing newline); the pattern is
# also the schema's, so it stays a plain one.
_PROFILE_RE = re.compile(r"^(\d+)g\.(\d+)gb(\+me)?$", re.ASCII)
_LABEL_RE = re.compile(r"^mig-(\d+)g(\d+)gb(-me)?-(\d)$")


# ---- names -----------------------------------------------------------------------------------------------


def profile_label(profile: str) -> str:
    """`1g.10gb` → `1g10gb`, `1g.10gb+me` → `1g10gb-me` (a DNS-label-safe spelling)."""
    m = _PROFILE_RE.fullmatch(profile)
    if m is None:
        raise InvalidNameError(f"MIG profile {excerpt(profile)} is not of the form <N>g.<M>gb[+me]")
    return f"{m.group(1)}g{m.group(2)}gb{'-me' if m.group(3) else ''}"


@dataclass(frozen=True, slots=True)
class ProfileSize:
    """What a profile name says about its size: `3g.40gb` → 3 compute slices, 40 GB, no media engines."""

    compute_slices: int
    memory_gb: int
    media_extension: bool


def profile_size(profile: str) -> ProfileSize:
    """The canonical spelling (`<N>g.<M>gb[+me]`) read; InvalidNameError for any other."""
    m = _PROFILE_RE.fullmatch(profile)
    if m is None:
        raise InvalidNameError(f"MIG profile {excerpt(profile)} is not of the form <N>g.<M>gb[+me]")
    return ProfileSize(int(m.group(1)), int(m.group(2)), m.group(3) is not None)


def mig_device_name(index: int, profile: str, start: int) -> DeviceName:
    return gpu_device_name(index, "mig", profile_label(profile), str(start))


def mig_device_class_name(profile: str) -> str:
    """`1g.10gb+me` → `mig-1g.10gb-me.gpu.tessera.dev`: one class per profile for extended resources."""
    return profile_class_name(NAME, profile)


@dataclass(frozen=True, slots=True)
class MigName:
    """A MIG device name's own part: the canonical profile (`1g.10gb+me`) and the placement start."""

    profile: str
    start: int


# ---- the node setting -------------------------------------------------------------------------------------


def _profiles(raw: object) -> frozenset[str] | None:
    """A list of distinct canonical profile names; `migProfiles` only thins what is published (a profile a
    GPU does not have is ignored, so one list serves a mixed fleet)."""
    if raw is None:
        return None
    if not isinstance(raw, list):
        raise ConfigError(
            f"migProfiles: expected a list like [1g.10gb, 3g.40gb, 7g.80gb], got {excerpt(raw)}"
        )
    if not raw:
        raise ConfigError("migProfiles: empty; to publish no MIG devices set families.mig: false instead")
    seen: set[str] = set()
    for k, p in enumerate(raw):
        if not isinstance(p, str):
            raise ConfigError(f"migProfiles[{k}]: expected a profile name like 1g.10gb, got {excerpt(p)}")
        try:
            profile_size(p)
        except InvalidNameError as e:
            raise ConfigError(f"migProfiles[{k}]: {e} (spelled as nvidia-smi mig -lgip does: 1g.10gb)") from e
        if p in seen:
            raise ConfigError(f"migProfiles[{k}]: {p} is listed twice; list each profile once")
        seen.add(p)
    return frozenset(seen)


PROFILES: NodeSetting[frozenset[str] | None] = NodeSetting(
    key="migProfiles",
    default=None,  # every profile
    meaning="the MIG profiles to publish (default: every profile the GPU has)",
    decode=_profiles,
    schema={
        "type": "array",
        "items": {"type": "string", "pattern": _PROFILE_RE.pattern},
        "minItems": 1,
        "uniqueItems": True,
    },
)


def publishes_profile(o: GpuOffer, profile: str) -> bool:
    chosen = o.setting(PROFILES)
    return chosen is None or profile in chosen


# ---- config, plan, record ----------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class MigConfig:
    """A MIG instance has nothing to tune yet; the kind exists so configs can name it explicitly."""


class MigAction(StrEnum):
    CREATE = "create"  # Tessera creates (or, rolling forward, reuses) an instance at the placement
    STATIC = "static"  # an administrator's instance already sits exactly there: use it, never destroy it


@dataclass(frozen=True, slots=True)
class MigPlan:
    placement: Placement
    profile_name: str
    size: int  # memory slices
    action: MigAction
    instance: MigInstance | None = None  # the live instance for STATIC
    enable_mig_mode: bool = False  # the GPU's MIG mode is off: Tessera switches it on first


@dataclass(frozen=True, slots=True)
class MigRecord:
    """A MIG instance a claim uses: intended (ids unset) until created, or an administrator's static one."""

    device: str
    placement: Placement
    profile_name: str
    created_by_tessera: bool = True
    gi_id: int | None = None
    ci_id: int | None = None
    uuid: str | None = None

    def with_instance(self, inst: MigInstance) -> MigRecord:
        return MigRecord(
            self.device,
            self.placement,
            self.profile_name,
            self.created_by_tessera,
            inst.gi_id,
            inst.ci_id,
            inst.uuid,
        )


def _overlaps(a_start: int, a_size: int, b_start: int, b_size: int) -> bool:
    return a_start < b_start + b_size and b_start < a_start + a_size


def _optional_int(data: Mapping[str, Any], key: str) -> int | None:
    value = data.get(key)
    if value is not None and (isinstance(value, bool) or not isinstance(value, int)):
        raise ValueError(f"field {key!r} must be an integer or null, got {excerpt(value)}")
    return value


def _required(data: Mapping[str, Any], key: str, kind: type[Any]) -> Any:
    value = data.get(key)
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise ValueError(f"field {key!r} must be a {kind.__name__}, got {excerpt(value)}")
    return value


def _mig_plan(d: Allocated[MigConfig, MigName], name: MigName, recorded: NodeRecords[MigRecord]) -> MigPlan:
    """Where the instance comes from: created by Tessera, reused (rolling forward), or an administrator's
    static one."""
    gpu = d.gpu
    profile: MigProfile | None = gpu.profile_by_name(name.profile)
    if not gpu.mig_capable or profile is None:
        raise ClaimError(
            f"device {d.device}: GPU {gpu.index} ({gpu.product_name}) has no MIG profile {name.profile}"
        )
    if name.start not in profile.placement_starts:
        raise ClaimError(
            f"device {d.device}: {name.profile} cannot start at memory slice {name.start} "
            f"(possible starts: {list(profile.placement_starts)})"
        )
    here = Placement(gpu.uuid, profile.profile_id, name.start)
    own = set(FAMILY.placements(recorded.claim))
    tessera = set(FAMILY.placements(recorded.others))
    if here in tessera and here not in own:
        raise PlacementTakenError(
            f"device {d.device}: MIG placement {name.profile}@{name.start} on GPU {gpu.index} is held by "
            "another prepared claim; unprepare it first"
        )
    enable = not gpu.mig_enabled
    create = MigPlan(here, profile.name, profile.memory_slices, MigAction.CREATE, enable_mig_mode=enable)
    for inst in gpu.mig_instances:
        if inst.placement == here:
            if here in own:
                return create
            return MigPlan(here, profile.name, profile.memory_slices, MigAction.STATIC, inst)
        if _overlaps(name.start, profile.memory_slices, inst.start, inst.size):
            owner = "another prepared claim" if inst.placement in tessera else "an administrator"
            raise PlacementTakenError(
                f"device {d.device}: MIG placement {name.profile}@{name.start} on GPU {gpu.index} overlaps "
                f"instance {inst.profile_name}@{inst.start} ({inst.uuid}) created by {owner}; "
                "destroy that instance or let the scheduler pick another placement"
            )
    if enable and not gpu.architecture.can_toggle_mig_without_reset:
        raise ClaimError(
            f"device {d.device}: GPU {gpu.index} ({gpu.architecture.value}) has MIG mode off and "
            "cannot switch it on without a reset; an administrator must enable MIG mode"
        )
    return create


# ---- the family ------------------------------------------------------------------------------------------


Planned = PlannedDevice[MigConfig, MigPlan]


class Mig(
    DeviceFamily[MigConfig, MigName, MigPlan, MigRecord, MigInstance],
    Ordered,
    Placing[MigConfig, MigPlan, MigRecord],
    NamedVisible[MigConfig, MigPlan, MigInstance],
):
    name = NAME
    rank = 30
    order_group = 3
    config = ConfigKind(kind="MigConfig", family=NAME, type=MigConfig, meaning="a MIG instance")
    record_key = "mig"
    owned_key = "migModeOwned"  # GPUs whose MIG mode Tessera switched on: it switches them off after its last
    class_meaning = "a MIG instance of any profile, created when the claim is prepared."
    settings = (PROFILES,)

    def class_profiles(self) -> tuple[str, ...]:
        """Every profile of the GPUs Tessera knows, GPU by GPU (`mig-1g.10gb.gpu.tessera.dev`, ...)."""
        return tuple(dict.fromkeys(p.name for product in PRODUCTS for p in product.mig_profiles))

    def parse_name(self, part: str) -> MigName | None:
        m = _LABEL_RE.match(part)
        if m is None:
            return None
        return MigName(f"{m.group(1)}g.{m.group(2)}gb{'+me' if m.group(3) else ''}", int(m.group(4)))

    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        if not gpu.mig_capable:
            return ()
        return tuple(
            mig_device_name(gpu.index, p.name, s) for p in gpu.mig_profiles for s in p.placement_starts
        )

    # -- offer --

    def order_key(self, device: Json, index: int) -> OrderKey:
        # smallest profile first; on each GPU the highest start first, so large placements stay open
        size = profile_size(str(attribute(device, Attr.PROFILE)))
        start = attribute(device, Attr.MIG_START)
        slot = start if isinstance(start, int) else 0
        return (size.compute_slices, size.memory_gb, size.media_extension, index, -slot)

    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        gpu = o.gpu
        statics = tuple(self._static(o, inst) for inst in o.admin)
        toggles = gpu.architecture.can_toggle_mig_without_reset
        if o.counters is None or not gpu.mig_capable or not gpu.mig_profiles:
            return statics
        if not gpu.mig_enabled and not toggles:
            return statics
        taken = collections.Counter(m.profile_id for m in o.admin)
        placements = tuple(
            self._placement(o, p, s)
            for p in gpu.mig_profiles
            if publishes_profile(o, p.name)
            for s in p.placement_starts
            if taken[p.profile_id] < p.max_instances
            and not any(_overlaps(s, p.memory_slices, a.start, a.size) for a in o.admin)
            and all(used <= o.counters.get(k, 0) for k, used in profile_counters(p).items() if used > 0)
        )
        return placements + statics

    @staticmethod
    def _attributes(o: GpuOffer, profile: str, start: int) -> Json:
        return {
            **gpu_attributes(o.gpu, o.inventory, NAME),
            qualified(Attr.PARENT_UUID): string(o.gpu.uuid),
            qualified(Attr.PROFILE): string(profile),
            qualified(Attr.MIG_START): {"int": start},
        }

    @staticmethod
    def _capacity(p: MigProfile) -> Json:
        return {
            Cap.MEMORY: {"value": f"{p.memory_mib}Mi"},
            Cap.MULTIPROCESSORS: {"value": str(p.multiprocessors)},
        }

    def _placement(self, o: GpuOffer, p: MigProfile, start: int) -> Json:
        assert o.counters is not None
        used = {memory_slice_counter(k): 1 for k in range(start, start + p.memory_slices)}
        used |= {k: v for k, v in profile_counters(p).items() if v > 0 and k in o.counters}
        return {
            "name": mig_device_name(o.gpu.index, p.name, start),
            "attributes": self._attributes(o, p.name, start),
            "capacity": self._capacity(p),
            "consumesCounters": consumes(o.gpu, used),
        }

    def _static(self, o: GpuOffer, inst: MigInstance) -> Json:
        attributes = self._attributes(o, inst.profile_name, inst.start)
        attributes[qualified(Attr.UUID)] = string(inst.uuid)
        attributes[qualified(Attr.MIG_STATIC)] = {"bool": True}
        device: Json = {
            "name": mig_device_name(o.gpu.index, inst.profile_name, inst.start),
            "attributes": attributes,
        }
        prof = o.gpu.profile_by_id(inst.profile_id)
        if prof is not None:
            device["capacity"] = self._capacity(prof)
        return device

    # -- plan --

    def occupancy(self, detail: MigName, gpu: Gpu) -> SliceOccupancy:
        """The placement's memory slices; a profile the GPU does not know (yet) is taken as all of them."""
        profile = gpu.profile_by_name(detail.profile)
        slices = (
            frozenset(range(detail.start, detail.start + profile.memory_slices))
            if profile is not None
            else all_slices(gpu)
        )
        what = f"MIG {detail.profile} at memory slice {detail.start}"
        return SliceOccupancy(family=NAME, slices=slices, what=what)

    def plan(self, d: Allocated[MigConfig, MigName], recorded: NodeRecords[MigRecord]) -> Planned:
        return d.planned(NAME, _mig_plan(d, d.detail, recorded))

    def check_claim(self, devices: Sequence[Planned]) -> None:
        seen: set[Placement] = set()
        for d in devices:
            placement = d.spec.placement
            if placement in seen:
                raise ClaimError(f"device {d.device} is allocated twice in one claim")
            seen.add(placement)

    def records(self, devices: Sequence[Planned], recorded: NodeRecords[MigRecord]) -> tuple[MigRecord, ...]:
        """Written ahead of any creation: the placements to create, and the administrator's instances used
        as they are."""
        out = []
        for d in devices:
            plan = d.spec
            inst = plan.instance
            out.append(
                MigRecord(
                    device=d.device,
                    placement=plan.placement,
                    profile_name=plan.profile_name,
                    created_by_tessera=plan.action is MigAction.CREATE,
                    gi_id=inst.gi_id if inst else None,
                    ci_id=inst.ci_id if inst else None,
                    uuid=inst.uuid if inst else None,
                )
            )
        return tuple(out)

    def placements(self, records: Sequence[MigRecord]) -> tuple[Placement, ...]:
        return tuple(r.placement for r in records if r.created_by_tessera)

    def allotment(
        self, device: DeviceName, gpu: Gpu, records: Sequence[MigRecord], limited: GpuLimitLine | None
    ) -> Allotment:
        record = next((r for r in records if r.device == device), None)
        profile = gpu.profile_by_name(record.profile_name) if record else None
        if record is None or profile is None:
            return Allotment(0, 0.0)
        ratio = profile.multiprocessors / gpu.multiprocessors if gpu.multiprocessors else 0.0
        return Allotment(profile.memory_mib << 20, ratio, mig_profile=profile.name, mig_uuid=record.uuid)

    def record_gpus(self, records: Sequence[MigRecord]) -> frozenset[GpuUUID]:
        return frozenset(r.placement.gpu_uuid for r in records)

    def encode_record(self, record: MigRecord) -> Json:
        return {
            "device": record.device,
            "gpuUUID": record.placement.gpu_uuid,
            "profileID": record.placement.profile_id,
            "profileName": record.profile_name,
            "start": record.placement.start,
            "createdByTessera": record.created_by_tessera,
            "giID": record.gi_id,
            "ciID": record.ci_id,
            "uuid": record.uuid,
        }

    def decode_record(self, data: Mapping[str, Any]) -> MigRecord:
        uuid = data.get("uuid")
        if uuid is not None and not isinstance(uuid, str):
            raise ValueError(f"field 'uuid' must be a string or null, got {excerpt(uuid)}")
        return MigRecord(
            device=_required(data, "device", str),
            placement=Placement(
                GpuUUID(_required(data, "gpuUUID", str)),
                _required(data, "profileID", int),
                _required(data, "start", int),
            ),
            profile_name=_required(data, "profileName", str),
            created_by_tessera=_required(data, "createdByTessera", bool),
            gi_id=_optional_int(data, "giID"),
            ci_id=_optional_int(data, "ciID"),
            uuid=uuid,
        )

    # -- the container --

    def device_edits(self, d: Planned, gpu: Gpu, made: MigInstance | None) -> ContainerEdits:
        inst = _instance(d, made)
        return ContainerEdits(device_nodes=(gpu.device_node, *inst.device_nodes))

    def status(self, d: Planned, made: MigInstance | None) -> Json:
        inst = d.spec.instance or made
        return {"migUUID": inst.uuid if inst is not None else None}

    def visible_id(self, d: Planned, made: MigInstance | None) -> str:
        return _instance(d, made).uuid


def _instance(d: Planned, made: MigInstance | None) -> MigInstance:
    inst = d.spec.instance or made
    if inst is None:
        raise MigError(f"device {d.device}: no MIG instance was created for it")
    return inst


FAMILY = Mig()
