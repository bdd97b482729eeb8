"""The vgpu family: a software slice of a GPU (pure). Device `gpu-<i>-vgpu`, DeviceClass `vgpu.tessera.dev`,
config kind `VgpuConfig`. docs/gpu-sharing.md.

One multi-allocatable device per GPU: every claim takes one of its `shares` with the memory and SM share it
asks for (consumable capacity), enforced in the container by the interception library. Claims on one GPU are
time-sliced by the GPU; each claim with an SM share gets its own part of the GPU's time-division frame, found
by the slot its checkpoint record holds (`GpuShare`, schedule in dra_driver/core/sm_schedule.py).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.core.config_schema import ClassOnly, ConfigField, ConfigKind, SmLimitPolicy
from dra_driver.core.families.base import (
    Allocated,
    Allotment,
    ClassVariant,
    GpuOffer,
    Json,
    NodeRecords,
    PlannedDevice,
    SliceOccupancy,
    Unnamed,
    not_in_mig_mode,
)
from dra_driver.core.families.capacity import (
    SHARES,
    SharedLimits,
    limits_status,
    shared_device,
    shared_limits,
    shared_occupancy,
)
from dra_driver.core.families.oversubscription import (
    OVERSUBSCRIPTION,
    Oversubscription,
    check_opt_in,
    virtual_bytes,
    virtual_capacity,
)
from dra_driver.core.families.protocol import DeviceFamily, LibraryLimited, TimeSliced
from dra_driver.core.sm_schedule import free_slot
from dra_driver.libtessera.limits_file import GpuLimitLine, LibraryLimits
from dra_driver.libtessera.view_layout import MAX_SLOTS
from dra_driver.vocabulary.errors import ClaimError, ConfigError
from dra_driver.vocabulary.inventory import Gpu
from dra_driver.vocabulary.names import ATTRIBUTE_DOMAIN, Cap, DeviceName, Family, GpuUUID, gpu_device_name

NAME = Family("vgpu")
_PART = "vgpu"


@dataclass(frozen=True, slots=True)
class VgpuConfig:
    sm_limit_policy: SmLimitPolicy = SmLimitPolicy.DEFAULT
    priority: int = 1  # HAMi CUDA_TASK_PRIORITY: 0 high (not held back by normal peers), 1 normal
    log_level: int = 1  # 0 errors only … 4 trace
    cores_limit: int = (
        0  # the SM share it may burst to in time its GPU's other claims leave idle; 0: its cores
    )
    # whether host memory may back what it was given beyond its `memory` (its `virtualMemory`)
    memory_oversubscription: Oversubscription = Oversubscription.DISABLED


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A vgpu claim's place on a shared GPU: its slot in the GPU's time-division schedule."""

    gpu_uuid: GpuUUID
    slot: int
    cores: int  # the share its part of the frame is sized by; 0 = none reserved
    high_priority: bool = False
    ceiling: int = 0  # what it may burst to when the GPU's other claims are idle; 0: its cores (no burst)


_CONFIG = ConfigKind(
    kind="VgpuConfig",
    family=NAME,
    type=VgpuConfig,
    meaning="a software slice of a GPU",
    fields=(
        ConfigField(
            name="smLimitPolicy",
            attr="sm_limit_policy",
            meaning="honour the SM share (default), enforce it even when alone (force), or ignore it "
            "(disable)",
            default=SmLimitPolicy.DEFAULT.value,
            choices=SmLimitPolicy,
            class_only=(
                ClassOnly(
                    value=SmLimitPolicy.DISABLE.value,
                    why="switches the claim's SM limit off",
                    instead="request fewer or more cores instead",
                ),
            ),
        ),
        ConfigField(
            name="priority",
            attr="priority",
            meaning="0 high (the GPU's normal claims wait while it has work), 1 normal",
            default=1,
            minimum=0,
            maximum=1,
            class_only=(
                ClassOnly(
                    value=0,
                    why="(high priority) holds the GPU's other claims back",
                    instead="use a DeviceClass your administrator made for high-priority work",
                ),
            ),
        ),
        ConfigField(
            name="coresLimit",
            attr="cores_limit",
            meaning="the SM share (%) the claim may burst to while the GPU's other claims leave time idle; "
            "0: its cores (no burst)",
            default=0,
            minimum=0,
            maximum=100,
        ),
        ConfigField(
            name="memoryOversubscription",
            attr="memory_oversubscription",
            meaning="enabled: the claim may consume virtualMemory, host-backed memory beyond its memory, on "
            "nodes whose memoryOversubscription is above 1",
            default=Oversubscription.DISABLED.value,
            choices=Oversubscription,
        ),
        ConfigField(
            name="logLevel",
            attr="log_level",
            meaning="the interception library's log level: 0 errors only … 4 trace",
            default=1,
            minimum=0,
            maximum=4,
        ),
    ),
)


def _int(data: Mapping[str, Any], key: str, low: int, high: int) -> int:
    value = data.get(key)
    if isinstance(value, bool) or not isinstance(value, int) or not low <= value <= high:
        raise ValueError(f"field {key!r} must be an integer {low}-{high}")
    return value


Planned = PlannedDevice[VgpuConfig, SharedLimits]

# The administrator's ready-made opt-in: a class that places its claims only where host memory backs
# virtualMemory, and lets them consume it.
OVERSUBSCRIBED_CLASS = ClassVariant(
    name="oversubscribed",
    meaning="a software slice that may be given host-backed memory beyond the GPU's own: capacity.requests "
    "virtualMemory beside memory, on nodes whose memoryOversubscription is above 1",
    selects=f'"{Cap.VIRTUAL_MEMORY}" in device.capacity["{ATTRIBUTE_DOMAIN}"]',
    config={"memoryOversubscription": Oversubscription.ENABLED.value},
)


class Vgpu(
    DeviceFamily[VgpuConfig, Unnamed, SharedLimits, GpuShare],
    TimeSliced[VgpuConfig, SharedLimits, GpuShare],
    LibraryLimited[VgpuConfig, SharedLimits],
):
    name = NAME
    rank = 10
    order_group = 0
    config = _CONFIG
    record_key = "sharing"
    class_meaning = "a software slice of a GPU (memory and SM share from capacity.requests)."
    settings = (SHARES, OVERSUBSCRIPTION)
    class_variants = (OVERSUBSCRIBED_CLASS,)

    def parse_name(self, part: str) -> Unnamed | None:
        return () if part == _PART else None

    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        return (gpu_device_name(gpu.index, _PART),)

    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        if not o.shareable or o.counters is None:
            return ()
        extra = virtual_capacity(o.gpu, o.setting(OVERSUBSCRIPTION))
        return (shared_device(o, family=NAME, part=_PART, shares=o.setting(SHARES), extra=extra),)

    def occupancy(self, detail: Unnamed, gpu: Gpu) -> SliceOccupancy:
        return shared_occupancy(gpu, family=NAME, what="a vGPU share")

    def plan(self, d: Allocated[VgpuConfig], recorded: NodeRecords[GpuShare]) -> Planned:
        not_in_mig_mode(d, "a vGPU")
        ratio = d.settings.get(OVERSUBSCRIPTION)
        limits = shared_limits(d, family=NAME, virtual_max=virtual_bytes(d.gpu, ratio))
        check_opt_in(
            where=f"device {d.device} (request {d.request})",
            virtual=limits.virtual_bytes,
            opted_in=d.config.memory_oversubscription is Oversubscription.ENABLED,
            gpu=d.gpu,
            ratio=ratio,
        )
        return d.planned(NAME, limits)

    def check_claim(self, devices: Sequence[Planned]) -> None:
        seen: set[int] = set()
        for d in devices:
            if d.gpu_index in seen:
                # The limits file has one line per GPU; two shares of one GPU in one container would merge.
                raise ClaimError(
                    f"device {d.device} is allocated to two requests of one claim; use one request"
                )
            seen.add(d.gpu_index)
        first = devices[0] if devices else None
        for d in devices[1:]:
            if first is not None and d.config != first.config:
                raise ConfigError(
                    f"VgpuConfig for request {d.request} differs from request {first.request}: one claim's "
                    "vgpu devices share one container, so give them the same smLimitPolicy, priority, "
                    "coresLimit, memoryOversubscription and logLevel"
                )

    def records(self, devices: Sequence[Planned], recorded: NodeRecords[GpuShare]) -> tuple[GpuShare, ...]:
        """A slot on each GPU: kept when the claim is prepared again, else the lowest free there. A GPU
        whose view is full (MAX_SLOTS claims: more than `sharesPerGpu` allows, so the scheduler was told
        otherwise) refuses the claim rather than leave it without its part of the frame."""
        if recorded.claim:
            return recorded.claim
        taken: dict[GpuUUID, set[int]] = {}
        for r in recorded.others:
            taken.setdefault(r.gpu_uuid, set()).add(r.slot)
        shares = []
        for d in devices:
            if len(taken.get(d.gpu_uuid, ())) >= MAX_SLOTS:
                raise ClaimError(
                    f"device {d.device}: GPU {d.gpu_uuid} already holds {MAX_SLOTS} vgpu claims, all its "
                    f"view has room for; the node publishes at most {MAX_SLOTS} shares per GPU "
                    "(sharesPerGpu), so re-allocate the claim"
                )
            config, limits = d.config, d.spec
            arbitrated = config.sm_limit_policy is not SmLimitPolicy.DISABLE
            shares.append(
                GpuShare(
                    gpu_uuid=d.gpu_uuid,
                    slot=free_slot(taken.get(d.gpu_uuid, set())),
                    cores=limits.cores if arbitrated else 0,
                    high_priority=arbitrated and config.priority == 0,
                    ceiling=ceiling(limits.cores, config) if arbitrated else 0,
                )
            )
        return tuple(shares)

    def record_gpus(self, records: Sequence[GpuShare]) -> frozenset[GpuUUID]:
        return frozenset(r.gpu_uuid for r in records)

    def allotment(
        self, device: DeviceName, gpu: Gpu, records: Sequence[GpuShare], limited: GpuLimitLine | None
    ) -> Allotment:
        if limited is None:
            return Allotment(0, 0.0)
        return Allotment(limited.memory_bytes, limited.cores / 100)

    def slots(self, records: Sequence[GpuShare]) -> Mapping[GpuUUID, int]:
        return {r.gpu_uuid: r.slot for r in records}

    def encode_record(self, record: GpuShare) -> Json:
        encoded: Json = {
            "gpuUUID": record.gpu_uuid,
            "slot": record.slot,
            "cores": record.cores,
            "highPriority": record.high_priority,
        }
        if record.ceiling:  # written only when set, so checkpoints of claims without burst read as before
            encoded["coresLimit"] = record.ceiling
        return encoded

    def decode_record(self, data: Mapping[str, Any]) -> GpuShare:
        uuid, high = data.get("gpuUUID"), data.get("highPriority")
        if not isinstance(uuid, str) or not isinstance(high, bool):
            raise ValueError("a share needs a string 'gpuUUID' and a boolean 'highPriority'")
        # records written before ceilings existed have none: no burst, as then
        return GpuShare(
            gpu_uuid=GpuUUID(uuid),
            slot=_int(data, "slot", 1, 65535),
            cores=_int(data, "cores", 0, 100),
            high_priority=high,
            ceiling=_int(data, "coresLimit", 0, 100) if "coresLimit" in data else 0,
        )

    def status(self, d: Planned, made: None) -> Json:
        """The limits, with the ceiling beside the guaranteed `cores` when the claim may burst."""
        shown = limits_status(d.spec)
        limit = ceiling(d.spec.cores, d.config)
        if limit:
            shown["limits"]["coresLimit"] = limit
        return shown

    def library(self, d: Planned) -> LibraryLimits:
        config, limits = d.config, d.spec
        opted_in = config.memory_oversubscription is Oversubscription.ENABLED
        return LibraryLimits(
            gpu_index=d.gpu_index,
            gpu_uuid=d.gpu_uuid,
            memory_bytes=limits.limit_bytes,
            # an opted-in claim holds its `memory` on the device, and the rest where the driver pages it
            resident_bytes=limits.memory_bytes if opted_in else None,
            cores=limits.cores,
            priority=config.priority,
            ceiling=ceiling(limits.cores, config),
            time_sliced=True,
            policy=config.sm_limit_policy.value,
            log_level=config.log_level,
        )


def ceiling(cores: int, config: VgpuConfig) -> int:
    """The share a claim may burst to: its `coresLimit`, never below its guarantee; 0 when it has no burst
    (no limit asked for, a limit of 0 or one at or under its cores). A claim without cores has no SM limit
    at all, so nothing to burst to."""
    return config.cores_limit if 0 < cores < config.cores_limit else 0


FAMILY = Vgpu()
