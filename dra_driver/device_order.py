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
- families are grouped (vgpu, whole, then MIG from the smallest profile up), so a request scans few devices
  that cannot match, and a request that accepts several profiles gets the smallest that fits.
`by-gpu` is the order before it: GPU by GPU, each GPU's whole device, vgpu and placements in ascending slot
order.
docs/performance.md has the measurements behind the choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum
from typing import Any

from dra_driver.names import Attr, Family, parse_profile, qualified

Json = dict[str, Any]


class DeviceOrder(StrEnum):
    FRAGMENTATION_AWARE = "fragmentation-aware"
    BY_GPU = "by-gpu"


_FAMILY_RANK = {Family.VGPU.value: 0, Family.GPU.value: 1, Family.MIG.value: 2}


def _attribute(device: Json, name: str) -> object:
    value = (device.get("attributes") or {}).get(qualified(name))
    return None if not isinstance(value, dict) or not value else next(iter(value.values()))


def _int(device: Json, name: str) -> int:
    value = _attribute(device, name)
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def fragmentation_key(device: Json) -> tuple[int, int, int, bool, int, int]:
    """Sort key of one device: (family, profile size..., GPU position, slot position)."""
    family = str(_attribute(device, Attr.TYPE))
    index = _int(device, Attr.INDEX)
    if family == Family.GPU.value:
        return (_FAMILY_RANK[family], 0, 0, False, -index, 0)
    if family == Family.MIG.value:
        size = parse_profile(str(_attribute(device, Attr.PROFILE)))
        start = _int(device, Attr.MIG_START)
        rank = _FAMILY_RANK[family]
        return (rank, size.compute_slices, size.memory_gb, size.media_extension, index, -start)
    return (_FAMILY_RANK.get(family, len(_FAMILY_RANK)), 0, 0, False, index, 0)


def order_devices(devices: Sequence[Json], order: DeviceOrder) -> list[Json]:
    """`devices` (GPU by GPU, as built) in the publishing order `order`; the sort is stable."""
    if order is DeviceOrder.BY_GPU:
        return list(devices)
    return sorted(devices, key=fragmentation_key)
