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
- where the node publishes its topology (`resource.kubernetes.io/numaNode`, else `pcieRoot`), "GPU 0
  upwards" walks the GPUs domain by domain, and whole GPUs are taken from the top of the *first* domain
  down, where the sharing families already are, before any other domain: the small requests fill one NUMA
  node (PCIe switch) before they open the next, and the untouched domains stay whole for claims that ask
  for 4 GPUs of one NUMA node or NVLink domain (docs/topology.md). Without topology it is the order above.
Each family says where its devices go (`DeviceFamily.order_group`, the `Ordered` capability); this module
applies it, handing each family the GPU's rank in that walk as its index.
`by-gpu` is the order before it: GPU by GPU, each GPU's whole device, vgpu and placements in ascending slot
order.
docs/performance.md has the measurements behind the choice.
"""

from __future__ import annotations

from collections.abc import Sequence
from enum import StrEnum

from dra_driver.core import families
from dra_driver.core.families.base import Json
from dra_driver.core.families.gpu import NAME as WHOLE_GPU
from dra_driver.core.families.protocol import Ordered
from dra_driver.core.families.published import attribute
from dra_driver.vocabulary.names import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE, Attr


class DeviceOrder(StrEnum):
    FRAGMENTATION_AWARE = "fragmentation-aware"
    BY_GPU = "by-gpu"


Key = tuple[int, tuple[int, int, bool, int, int]]


def _standard(device: Json, name: str) -> object:
    value = (device.get("attributes") or {}).get(name)
    if not isinstance(value, dict) or not value:
        return None
    found = next(iter(value.values()))
    return found[0] if isinstance(found, list) and found else found  # numaNode's list form: its own node


def _domain(device: Json) -> tuple[str, str]:
    """The GPU's topology domain (its NUMA node, else its PCIe root) and its PCIe root ("" where unknown)."""
    numa, root = _standard(device, NUMA_NODE_ATTRIBUTE), _standard(device, PCIE_ROOT_ATTRIBUTE)
    root_text = str(root) if root is not None else ""
    return (f"numa-{numa:08d}" if isinstance(numa, int) else root_text, root_text)


def topology_ranks(devices: Sequence[Json]) -> tuple[dict[int, int], dict[int, int]]:
    """GPU index → the index each family is handed: for the sharing families and MIG, the GPU's place in the
    domain-by-domain walk; for whole GPUs (taken from the highest index down), a rank whose highest is the
    top GPU of the first domain. Both are the GPU's own index where the node publishes no topology."""
    place: dict[int, tuple[str, str]] = {}
    for d in devices:
        index = attribute(d, Attr.INDEX)
        if isinstance(index, int) and index not in place:
            place[index] = _domain(d)
    if len({domain for domain, _ in place.values()}) <= 1:
        return {i: i for i in place}, {i: i for i in place}
    first_index: dict[str, int] = {}
    for index, (domain, _) in sorted(place.items()):
        first_index.setdefault(domain, index)
    walk = sorted(place, key=lambda i: (first_index[place[i][0]], place[i][1], i))
    up = {index: rank for rank, index in enumerate(walk)}
    # whole GPUs: domain by domain in the same order, each from its top down; the first taken ranks highest
    taken = sorted(place, key=lambda i: (first_index[place[i][0]], -up[i]))
    down = {index: len(taken) - 1 - k for k, index in enumerate(taken)}
    return up, down


def fragmentation_key(device: Json, ranks: tuple[dict[int, int], dict[int, int]] | None = None) -> Key:
    """Sort key of one device: its family's group, then the family's key (profile size, GPU, slot); `ranks`:
    the GPUs' ranks in the topology walk (`topology_ranks`), default their indices."""
    family = families.find(str(attribute(device, Attr.TYPE)))
    index = attribute(device, Attr.INDEX)
    if family is None:  # not ours to order: last, as built
        return (len(families.FAMILIES) + 1, (0, 0, False, 0, 0))
    gpu = index if isinstance(index, int) else 0
    if ranks is not None:
        gpu = (ranks[1] if family.name == WHOLE_GPU else ranks[0]).get(gpu, gpu)
    # a family without its own order is a sharing one: packed from the first GPU upwards
    key = family.order_key(device, gpu) if isinstance(family, Ordered) else (0, 0, False, gpu, 0)
    return (family.order_group, key)


def order_devices(devices: Sequence[Json], order: DeviceOrder) -> list[Json]:
    """`devices` (GPU by GPU, as built) in the publishing order `order`; the sort is stable."""
    if order is DeviceOrder.BY_GPU:
        return list(devices)
    ranks = topology_ranks(devices)
    return sorted(devices, key=lambda d: fragmentation_key(d, ranks))
