"""Per-GPU devices and counter sets, as resource.k8s.io/v1 wire objects (plain dicts, camelCase).

Pure: a function of the inventory and the settings. `slices` packs what this module builds into slices.
The rules (DESIGN.md, "ResourceSlice model"):
- Hopper or newer: `gpu`, `vgpu` and every MIG placement (Tessera toggles MIG mode itself).
- Ampere, MIG mode off: `gpu` and `vgpu`; MIG mode on (an administrator's doing): MIG placements only.
- No MIG: `gpu` and `vgpu`.
- An administrator's live instances become static MIG devices (with `uuid`); placements overlapping them are
  not offered, and neither are the whole GPU and vgpu of that GPU.
Mutual exclusion is left to the scheduler through one counter set per GPU.
"""

from __future__ import annotations

import collections
from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any

from dra_driver.model import Gpu, Inventory, MigInstance, MigProfile
from dra_driver.names import (
    PCI_BUS_ID_ATTRIBUTE,
    Attr,
    Cap,
    Counter,
    Family,
    GpuUUID,
    counter_set_name,
    gpu_device_name,
    memory_slice_counter,
    mig_device_name,
    qualified,
    vgpu_device_name,
)
from dra_driver.settings import NodeSettings

MIB = 1024 * 1024
MAX_CORES = 100
Json = dict[str, Any]  # a resource.k8s.io/v1 object in wire form


@dataclass(frozen=True, slots=True)
class PlacementRef:
    """A MIG placement Tessera created for a claim (from the checkpoint); anything else live is an admin's."""

    gpu_uuid: GpuUUID
    profile_id: int
    start: int


@dataclass(frozen=True, slots=True)
class GpuDevices:
    index: int
    counter_set: Json | None
    devices: tuple[Json, ...]


# ---- values -------------------------------------------------------------------------------------


def semver(version: str) -> str:
    """NVML versions as semver: "9.0" → "9.0.0", "535.104.05" → "535.104.5" (no leading zeros in semver)."""
    parts = [p for p in version.strip().split(".") if p]
    numbers = [str(int(p)) if p.isdigit() else p for p in parts[:3]]
    while len(numbers) < 3:
        numbers.append("0")
    return ".".join(numbers)


def pci_bus_id(bus_id: str) -> str:
    """NVML's `00000000:18:00.0` as the standard attribute writes it: `0000:18:00.0`."""
    domain, sep, rest = bus_id.strip().lower().partition(":")
    if not sep or not all(c in "0123456789abcdef" for c in domain):
        return bus_id.strip().lower()
    return f"{int(domain, 16):04x}:{rest}"


def mib_quantity(n_bytes: int) -> str:
    return f"{n_bytes // MIB}Mi" if n_bytes % MIB == 0 else str(n_bytes)


def _string(value: str) -> Json:
    return {"string": value[:64]}


def _common_attributes(gpu: Gpu, inventory: Inventory) -> Json:
    return {
        qualified(Attr.PRODUCT_NAME): _string(gpu.product_name),
        qualified(Attr.BRAND): _string(gpu.brand),
        qualified(Attr.ARCHITECTURE): _string(gpu.architecture.value),
        qualified(Attr.CUDA_COMPUTE_CAPABILITY): {"version": semver(gpu.cuda_compute_capability)},
        qualified(Attr.DRIVER_VERSION): {"version": semver(inventory.driver_version)},
        qualified(Attr.CUDA_DRIVER_VERSION): {"version": semver(inventory.cuda_driver_version)},
        qualified(Attr.INDEX): {"int": gpu.index},
        PCI_BUS_ID_ATTRIBUTE: _string(pci_bus_id(gpu.pci_bus_id)),
    }


# ---- counters -----------------------------------------------------------------------------------


def _profile_counters(p: MigProfile) -> dict[str, int]:
    return {
        Counter.MULTIPROCESSORS: p.multiprocessors,
        Counter.COPY_ENGINES: p.copy_engines,
        Counter.DECODERS: p.decoders,
        Counter.ENCODERS: p.encoders,
        Counter.JPEG_ENGINES: p.jpeg_engines,
        Counter.OFA_ENGINES: p.ofa_engines,
        Counter.MEMORY: p.memory_mib * MIB,
    }


Placement = tuple[MigProfile, int]  # (profile, start)


def _gpu_counters(gpu: Gpu) -> dict[str, int]:
    return {
        Counter.MULTIPROCESSORS: gpu.multiprocessors,
        Counter.COPY_ENGINES: gpu.copy_engines,
        Counter.DECODERS: gpu.decoders,
        Counter.ENCODERS: gpu.encoders,
        Counter.JPEG_ENGINES: gpu.jpeg_engines,
        Counter.OFA_ENGINES: gpu.ofa_engines,
        Counter.MEMORY: gpu.memory_bytes,
    }


def counter_totals(gpu: Gpu, admin: tuple[MigInstance, ...]) -> dict[str, int]:
    """Counter name → total for the GPU's counter set: one per memory slice, plus the GPU's engines, SMs
    and memory less what an administrator's instances hold (those are never allocated, so they could not
    consume counters themselves)."""
    totals: dict[str, int] = {memory_slice_counter(k): 1 for k in range(gpu.memory_slice_count)}
    remaining = _gpu_counters(gpu)
    for inst in admin:
        prof = gpu.profile_by_id(inst.profile_id)
        if prof is not None:
            for name, used in _profile_counters(prof).items():
                remaining[name] -= used
    totals.update(remaining)
    return totals


def _fits(prof: MigProfile, totals: dict[str, int]) -> bool:
    return all(used <= totals.get(name, 0) for name, used in _profile_counters(prof).items() if used > 0)


def _quantity(name: str, value: int) -> Json:
    return {"value": mib_quantity(value) if name == Counter.MEMORY else str(value)}


def _counters(values: dict[str, int]) -> Json:
    return {name: _quantity(name, v) for name, v in sorted(values.items())}


def _consumes(gpu: Gpu, values: dict[str, int]) -> list[Json]:
    return [{"counterSet": counter_set_name(gpu.index), "counters": _counters(values)}]


# ---- devices ------------------------------------------------------------------------------------


def _whole(gpu: Gpu, inventory: Inventory, totals: dict[str, int] | None) -> Json:
    device: Json = {
        "name": gpu_device_name(gpu.index),
        "attributes": {
            qualified(Attr.TYPE): _string(Family.GPU.value),
            qualified(Attr.UUID): _string(gpu.uuid),
            **_common_attributes(gpu, inventory),
        },
        "capacity": {
            Cap.MEMORY: {"value": mib_quantity(gpu.memory_bytes)},
            Cap.MULTIPROCESSORS: {"value": str(gpu.multiprocessors)},
        },
    }
    if totals is not None:
        device["consumesCounters"] = _consumes(gpu, totals)
    return device


def _vgpu(gpu: Gpu, inventory: Inventory, totals: dict[str, int], shares: int) -> Json:
    memory = mib_quantity(gpu.memory_bytes // MIB * MIB)  # the range's max must be a multiple of its step
    return {
        "name": vgpu_device_name(gpu.index),
        "allowMultipleAllocations": True,
        "attributes": {
            qualified(Attr.TYPE): _string(Family.VGPU.value),
            qualified(Attr.UUID): _string(gpu.uuid),
            qualified(Attr.PARENT_UUID): _string(gpu.uuid),
            **_common_attributes(gpu, inventory),
        },
        "capacity": {
            # A claim that names no memory gets all of it, as with HAMi's default.
            Cap.MEMORY: {
                "value": memory,
                "requestPolicy": {
                    "default": memory,
                    "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"},
                },
            },
            # 0 = no SM limit and no reservation.
            Cap.CORES: {
                "value": str(MAX_CORES),
                "requestPolicy": {
                    "default": "0",
                    "validRange": {"min": "0", "max": str(MAX_CORES), "step": "1"},
                },
            },
            # Every allocation takes exactly one share: at most `shares` claims per GPU.
            Cap.SHARES: {
                "value": str(shares),
                "requestPolicy": {"default": "1", "validValues": ["1"]},
            },
        },
        "consumesCounters": _consumes(gpu, totals),
    }


def _mig_attributes(gpu: Gpu, inventory: Inventory, prof_name: str, start: int) -> Json:
    return {
        qualified(Attr.TYPE): _string(Family.MIG.value),
        qualified(Attr.PARENT_UUID): _string(gpu.uuid),
        qualified(Attr.PROFILE): _string(prof_name),
        qualified(Attr.MIG_START): {"int": start},
        **_common_attributes(gpu, inventory),
    }


def _mig_capacity(prof: MigProfile) -> Json:
    return {
        Cap.MEMORY: {"value": f"{prof.memory_mib}Mi"},
        Cap.MULTIPROCESSORS: {"value": str(prof.multiprocessors)},
    }


def _placement(gpu: Gpu, inventory: Inventory, prof: MigProfile, start: int, totals: dict[str, int]) -> Json:
    used = {memory_slice_counter(k): 1 for k in range(start, start + prof.memory_slices)}
    used |= {k: v for k, v in _profile_counters(prof).items() if v > 0 and k in totals}
    return {
        "name": mig_device_name(gpu.index, prof.name, start),
        "attributes": _mig_attributes(gpu, inventory, prof.name, start),
        "capacity": _mig_capacity(prof),
        "consumesCounters": _consumes(gpu, used),
    }


def _static(gpu: Gpu, inventory: Inventory, inst: MigInstance) -> Json:
    prof = gpu.profile_by_id(inst.profile_id)
    attributes = _mig_attributes(gpu, inventory, inst.profile_name, inst.start)
    attributes[qualified(Attr.UUID)] = _string(inst.uuid)
    attributes[qualified(Attr.MIG_STATIC)] = {"bool": True}
    device: Json = {
        "name": mig_device_name(gpu.index, inst.profile_name, inst.start),
        "attributes": attributes,
    }
    if prof is not None:
        device["capacity"] = _mig_capacity(prof)
    return device


def _overlaps(start: int, size: int, taken: Iterable[MigInstance]) -> bool:
    return any(start < t.start + t.size and t.start < start + size for t in taken)


def offered_families(gpu: Gpu, settings: NodeSettings, *, admin_instances: bool) -> frozenset[Family]:
    """What this GPU can offer without a reset, intersected with what the node's settings allow."""
    toggles = gpu.architecture.can_toggle_mig_without_reset
    offered: set[Family] = set()
    if not admin_instances and (not gpu.mig_enabled or toggles):
        offered |= {Family.GPU, Family.VGPU}
    if gpu.mig_capable and gpu.mig_profiles and (gpu.mig_enabled or toggles):
        offered.add(Family.MIG)
    return frozenset(f for f in offered if settings.offers(f))


def gpu_devices(
    gpu: Gpu,
    inventory: Inventory,
    settings: NodeSettings,
    *,
    owned: frozenset[PlacementRef] = frozenset(),
    degraded: bool = False,
) -> GpuDevices:
    """The devices and the counter set of one GPU; `degraded` = whole GPUs only, without counters."""
    admin = tuple(m for m in gpu.mig_instances if PlacementRef(gpu.uuid, m.profile_id, m.start) not in owned)
    families = offered_families(gpu, settings, admin_instances=bool(admin))
    statics = tuple(_static(gpu, inventory, m) for m in admin) if Family.MIG in settings.families else ()
    if degraded:
        whole = (_whole(gpu, inventory, None),) if Family.GPU in families else ()
        return GpuDevices(gpu.index, None, whole + statics)

    totals = counter_totals(gpu, admin)
    taken = collections.Counter(m.profile_id for m in admin)
    placements: tuple[Placement, ...] = tuple(
        (p, s)
        for p in gpu.mig_profiles
        for s in p.placement_starts
        if taken[p.profile_id] < p.max_instances
        and not _overlaps(s, p.memory_slices, admin)
        and _fits(p, totals)
    )
    totals = {name: value for name, value in totals.items() if value > 0}
    devices: list[Json] = []
    if Family.GPU in families:
        devices.append(_whole(gpu, inventory, totals))
    if Family.VGPU in families:
        devices.append(_vgpu(gpu, inventory, totals, settings.vgpu_shares))
    if Family.MIG in families:
        devices.extend(_placement(gpu, inventory, p, s, totals) for p, s in placements)
    devices.extend(statics)
    used = any("consumesCounters" in d for d in devices)
    counter_set: Json = {"name": counter_set_name(gpu.index), "counters": _counters(totals)}
    return GpuDevices(gpu.index, counter_set if used else None, tuple(devices))
