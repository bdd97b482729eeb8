"""Per-GPU devices and counter sets, as resource.k8s.io/v1 wire objects (pure).

Each family offers its devices for a GPU (dra_driver/core/families); this module hands every family the same
view of the GPU — its administrator's MIG instances and its counter totals — and collects the result.
`slices` packs what this module builds into slices. The rules (docs/architecture.md, "The slice model"):
- Hopper or newer: every family (Tessera toggles MIG mode itself).
- Ampere, MIG mode off: the software families (whole GPU, vgpu, ...); MIG mode on (an administrator's
  doing): MIG placements only.
- An administrator's live instances become static MIG devices; placements overlapping them are not offered,
  and neither are the whole GPU and the software slices of that GPU.
Mutual exclusion is left to the scheduler through one counter set per GPU.
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from dra_driver.core import families
from dra_driver.core.families.base import GpuOffer, Json
from dra_driver.core.families.published import counter_set, counter_totals
from dra_driver.core.settings import NodeSettings
from dra_driver.values.model import Gpu, Inventory, Placement


@dataclass(frozen=True, slots=True)
class GpuDevices:
    index: int
    counter_set: Json | None
    devices: tuple[Json, ...]


def gpu_devices(
    gpu: Gpu,
    inventory: Inventory,
    settings: NodeSettings,
    *,
    owned: Collection[Placement] = frozenset(),
    degraded: bool = False,
) -> GpuDevices:
    """The devices and the counter set of one GPU.

    `owned`: MIG placements Tessera holds (from the checkpoint); every other live instance is an
    administrator's. `degraded`: no counters, so only what needs none (whole GPUs, static MIG devices).
    An unhealthy GPU offers the same devices; `slices.build_slices` taints them.
    """
    admin = tuple(m for m in gpu.mig_instances if m.placement not in owned)
    totals = None if degraded else counter_totals(gpu, admin)
    offer = GpuOffer(
        gpu=gpu,
        inventory=inventory,
        settings=settings.family,
        admin=admin,
        counters=totals,
    )
    devices = tuple(d for f in families.FAMILIES if settings.offers(f.name) for d in f.offer(offer))
    used = totals is not None and any("consumesCounters" in d for d in devices)
    return GpuDevices(gpu.index, counter_set(gpu, totals) if used and totals is not None else None, devices)
