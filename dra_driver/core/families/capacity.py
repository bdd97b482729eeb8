"""The consumable capacity of a device many claims share (vgpu, MPS): published, then read back (pure).

Limits never come from a config: a shared device's memory and cores are what the scheduler allocated, read
from the allocation result's `consumedCapacity` and checked against the policy published with the device.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.core.families.base import Allocated, GpuOffer, Json, NodeSetting, SliceOccupancy, all_slices
from dra_driver.core.families.published import MIB, consumes, gpu_attributes, mib_quantity, string
from dra_driver.libtessera.view_layout import MAX_SLOTS
from dra_driver.vocabulary.errors import ClaimError, ConfigError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import Gpu
from dra_driver.vocabulary.names import Attr, Cap, Family, gpu_device_name, qualified
from dra_driver.vocabulary.quantity import parse_quantity

MAX_CORES = 100
DEFAULT_SHARES = 10  # HAMi's default split count
# Every vgpu claim on a GPU needs its entry in the GPU's view (its part of the frame), and the view holds
# MAX_SLOTS (interceptor/src/view.h: TV_MAX_SLOTS): a share past them would be prepared without a part.
MAX_SHARES = MAX_SLOTS


def _shares(raw: object) -> int:
    if not isinstance(raw, int) or isinstance(raw, bool):
        raise ConfigError(f"sharesPerGpu: expected an integer, got {excerpt(raw)}")
    if not 1 <= raw <= MAX_SHARES:
        raise ConfigError(
            f"sharesPerGpu: {raw} is out of range; use 1..{MAX_SHARES} (a GPU's view holds the parts of "
            f"{MAX_SHARES} claims)"
        )
    return raw


# Declared by vgpu (its node setting); MPS reads it too and takes at most its own maximum. Named `vgpuShares`
# until it was seen to cap MPS too: that key is still read (both given must agree).
SHARES = NodeSetting(
    key="sharesPerGpu",
    default=DEFAULT_SHARES,
    meaning=(
        f"how many claims may share one GPU's vgpu or MPS device (1..{MAX_SHARES}; MPS: within its "
        "client limit)"
    ),
    decode=_shares,
    schema={"type": "integer", "minimum": 1, "maximum": MAX_SHARES},
    former_keys=("vgpuShares",),
)


@dataclass(frozen=True, slots=True)
class SharedLimits:
    """What one claim's share of a GPU may use: its memory and its SM share (0 = no limit, no reservation)."""

    memory_bytes: int  # promised on the device
    cores: int
    virtual_bytes: int = 0  # host-backed beyond it (vgpu with memoryOversubscription); its limit is the sum

    @property
    def limit_bytes(self) -> int:
        """All the memory the claim may allocate: what the device holds for it and what host memory backs."""
        return self.memory_bytes + self.virtual_bytes


def limits_status(limits: SharedLimits) -> Json:
    """What a claim's status says of a shared device's limits (`virtualMemory`: host-backed, if any)."""
    shown: Json = {"memory": f"{limits.memory_bytes >> 20}Mi", "cores": limits.cores}
    if limits.virtual_bytes:
        shown[Cap.VIRTUAL_MEMORY] = f"{limits.virtual_bytes >> 20}Mi"
    return {"limits": shown}


def shared_device(o: GpuOffer, *, family: Family, part: str, shares: int, extra: Json | None = None) -> Json:
    """The one multi-allocatable device a sharing family publishes for a GPU (`gpu-<i>-<part>`), which
    consumes the whole GPU's counters at its first allocation; needs `o.counters`. `extra`: capacities the
    family adds (vgpu's `virtualMemory`)."""
    assert o.counters is not None
    gpu = o.gpu
    return {
        "name": gpu_device_name(gpu.index, part),
        "allowMultipleAllocations": True,
        "attributes": {
            **gpu_attributes(gpu, o.inventory, family),
            qualified(Attr.UUID): string(gpu.uuid),
            qualified(Attr.PARENT_UUID): string(gpu.uuid),
        },
        "capacity": {**shared_capacity(gpu, shares=shares), **(extra or {})},
        "consumesCounters": consumes(gpu, o.counters),
    }


def shared_occupancy(gpu: Gpu, *, family: Family, what: str) -> SliceOccupancy:
    """A shared device takes the whole GPU (its counters, at its first allocation), together with the other
    claims of its own family only."""
    return SliceOccupancy(family=family, slices=all_slices(gpu), shared=True, what=what)


def shared_capacity(gpu: Gpu, *, shares: int) -> Json:
    """Memory (a claim naming none gets all of it, as with HAMi's default), cores (0 = no SM limit and no
    reservation) and shares (every allocation takes exactly one: at most `shares` claims per GPU)."""
    memory = mib_quantity(gpu.memory_bytes // MIB * MIB)  # the range's max must be a multiple of its step
    return {
        Cap.MEMORY: {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}},
        },
        Cap.CORES: {
            "value": str(MAX_CORES),
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": str(MAX_CORES), "step": "1"}},
        },
        Cap.SHARES: {"value": str(shares), "requestPolicy": {"default": "1", "validValues": ["1"]}},
    }


def _consumed(consumed: Mapping[str, str], name: str) -> str | None:
    # Capacity names may come back bare (domain implied) or qualified with the driver's domain.
    return consumed.get(name, consumed.get(qualified(name)))


def shared_limits(d: Allocated[Any, Any], *, family: str, virtual_max: int = 0) -> SharedLimits:
    """The allocated share's limits, or a ClaimError naming what is wrong and what to do. `virtual_max`: the
    `virtualMemory` the device was published with (0: none, so none may be consumed)."""
    where = f"{family} device {d.device}"
    if not d.consumed:
        raise ClaimError(
            f"{where} (request {d.request}) has no consumedCapacity in the allocation; the API server needs "
            "the DRAConsumableCapacity feature, and the claim must be re-allocated"
        )
    values: dict[str, int] = {}
    for name in (Cap.MEMORY, Cap.CORES, Cap.VIRTUAL_MEMORY):
        raw = _consumed(d.consumed, name)
        if raw is None and name == Cap.VIRTUAL_MEMORY:
            raw = "0"  # only an oversubscribed node publishes it
        if raw is None:
            raise ClaimError(f"{where}: consumedCapacity has no {name!r} (got {excerpt(sorted(d.consumed))})")
        try:
            amount = parse_quantity(raw).value
        except ConfigError as e:
            raise ClaimError(f"{where}: consumedCapacity {name} {excerpt(raw)} is not a quantity") from e
        if amount.denominator != 1:
            raise ClaimError(f"{where}: consumedCapacity {name} {excerpt(raw)} is not a whole number")
        values[name] = int(amount)
    memory, cores = values[Cap.MEMORY], values[Cap.CORES]
    if not MIB <= memory <= d.gpu.memory_bytes or memory % MIB:
        raise ClaimError(
            f"{where}: consumed memory {memory} bytes is outside the device's policy "
            f"({MIB}…{d.gpu.memory_bytes} in steps of {MIB})"
        )
    if not 0 <= cores <= MAX_CORES:
        raise ClaimError(f"{where}: consumed cores {cores} is outside the device's policy (0…{MAX_CORES})")
    virtual = values[Cap.VIRTUAL_MEMORY]
    if not 0 <= virtual <= virtual_max or virtual % MIB:
        raise ClaimError(
            f"{where}: consumed virtualMemory {virtual} bytes is outside the device's policy "
            f"(0…{virtual_max} in steps of {MIB}; the node's memoryOversubscription sets it)"
        )
    return SharedLimits(memory_bytes=memory, cores=cores, virtual_bytes=virtual)
