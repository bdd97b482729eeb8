"""The order in which a node's devices are published: kube-scheduler's only placement policy inside a node.

kube-scheduler does not score DRA devices (KEP issue #4970): it allocates first-fit, visiting a pool's slices
by name and each slice's devices in order. So the publishing order decides which GPU and which MIG slot a
claim gets. Pure: it reads only the published attributes (`type`, `index`, `profile`, `migPlacementStart`).

`fragmentation-aware` (the default) keeps the large choices open longest under first-fit:
- sharing families pack from the first GPU upwards: `vgpu` goes onto a GPU that is already shared before an
  untouched one, MIG placements onto a GPU that is already partitioned;
- whole GPUs are taken from the last GPU downwards, away from the sharing end;
- within one MIG profile, on each GPU, the highest placement start comes first (1g.10gb at memory slice 6, 5,
  4, ...; 3g.40gb at 4 before 0), so `4g.40gb` at slot 0 and `7g.80gb` stay possible as long as possible;
- families are grouped (vgpu, MPS, whole, then MIG from the smallest profile up), so a request scans few
  devices that cannot match, and a request that accepts several profiles gets the smallest that fits.
Each family says where its devices go (`DeviceFamily.order_group`, the `Ordered` capability); this module
applies it.
`by-gpu` is the order before it: GPU by GPU, each GPU's whole device, vgpu and placements in ascending slot
order.
docs/performance.md has the measurements behind the choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from dra_driver.core import families
from dra_driver.core.families.base import Json
from dra_driver.core.families.protocol import Ordered
from dra_driver.core.families.published import attribute
from dra_driver.values.names import Attr


class DeviceOrder(StrEnum):
    FRAGMENTATION_AWARE = "fragmentation-aware"
    BY_GPU = "by-gpu"


def fragmentation_key(device: Json) -> tuple[int, tuple[int, int, bool, int, int]]:
    """Sort key of one device: its family's group, then the family's key (profile size, GPU, slot)."""
    family = families.find(str(attribute(device, Attr.TYPE)))
    index = attribute(device, Attr.INDEX)
    if family is None:  # not ours to order: last, as built
        return (len(families.FAMILIES) + 1, (0, 0, False, 0, 0))
    gpu = index if isinstance(index, int) else 0
    # a family without its own order is a sharing one: packed from the first GPU upwards
    key = family.order_key(device, gpu) if isinstance(family, Ordered) else (0, 0, False, gpu, 0)
    return (family.order_group, key)


def order_devices(devices: Sequence[Json], order: DeviceOrder) -> list[Json]:
    """`devices` (GPU by GPU, as built) in the publishing order `order`; the sort is stable."""
    if order is DeviceOrder.BY_GPU:
        return list(devices)
    return sorted(devices, key=fragmentation_key)
