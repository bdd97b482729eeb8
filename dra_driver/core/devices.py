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
from dra_driver.core.families.gpu import NAME as WHOLE_GPU
from dra_driver.core.families.published import (
    attribute,
    counter_set,
    counter_totals,
    nvlink_attributes,
    topology_attributes,
)
from dra_driver.core.settings import NodeSettings
from dra_driver.vocabulary.inventory import Gpu, Inventory, Placement
from dra_driver.vocabulary.names import Attr


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
    devices = _placed(devices, gpu, inventory, settings)
    used = totals is not None and any("consumesCounters" in d for d in devices)
    return GpuDevices(gpu.index, counter_set(gpu, totals) if used and totals is not None else None, devices)


def _placed(
    devices: tuple[Json, ...], gpu: Gpu, inventory: Inventory, settings: NodeSettings
) -> tuple[Json, ...]:
    """Every device with its GPU's place (pcieRoot, numaNode), whole GPUs with its NVLink domain too, added
    here once for every family (docs/topology.md); a GPU the node says nothing about is left as it was."""
    everyone = topology_attributes(gpu, settings.numa_node_form)
    whole = nvlink_attributes(gpu, inventory)
    if not everyone and not whole:
        return devices
    out = []
    for d in devices:
        extra = {**everyone, **(whole if attribute(d, Attr.TYPE) == WHOLE_GPU else {})}
        attributes = d.get("attributes", {})
        assert isinstance(attributes, dict)
        out.append({**d, "attributes": {**attributes, **extra}} if extra else d)
    return tuple(out)
