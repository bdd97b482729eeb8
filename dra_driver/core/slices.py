"""Inventory + settings → the node pool's ResourceSlices (resource.k8s.io/v1 wire dicts).

Pure. Packing respects every API limit: counter sets and devices in separate slices (Kubernetes ≥ 1.35),
≤ 8 counter sets per slice, ≤ 32 counters per set, ≤ 64 devices per slice when any device consumes
counters (128 otherwise), ≤ 32 attributes + capacities per device, strings ≤ 64 characters.
The families offer each GPU's devices (the MIG family only the settings' `migProfiles`); here each GPU's
counter model is reduced to the consumptions that decide something (dra_driver.core.counter_reduction: the
same combinations stay allowed, a set that can never bind goes) and the devices are put in the settings'
`deviceOrder` (dra_driver.core.device_order), in one place, then cut into slices in that order: kube-scheduler
visits a pool's slices by name and allocates first-fit, so this order is the placement policy inside a node.
Any change rewrites every slice of the pool anyway (a new pool generation), so nothing is gained by keeping a
GPU's devices in one slice. The publisher owns `pool.generation`; `build_slices` writes the generation it is
given.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence

from dra_driver.core.counter_reduction import reduce_counters
from dra_driver.core.device_order import order_devices
from dra_driver.core.devices import GpuDevices, gpu_devices
from dra_driver.core.families.base import Json
from dra_driver.core.settings import NodeSettings
from dra_driver.core.taints import GpuTaints, inventory_taints, tainted
from dra_driver.vocabulary.errors import InventoryError
from dra_driver.vocabulary.inventory import Inventory, Placement
from dra_driver.vocabulary.names import DRIVER_NAME, resource_slice_name

API_VERSION = "resource.k8s.io/v1"
KIND = "ResourceSlice"
MAX_DEVICES = 128
MAX_DEVICES_WITH_COUNTERS = 64
MAX_COUNTER_SETS = 8
MAX_COUNTERS_PER_SET = 32
MAX_ATTRIBUTES_AND_CAPACITIES = 32


def _device_limit(devices: Sequence[Json]) -> int:
    uses_counters = any("consumesCounters" in d or "taints" in d for d in devices)
    return MAX_DEVICES_WITH_COUNTERS if uses_counters else MAX_DEVICES


def _check(group: GpuDevices) -> None:
    """Limits one GPU's content must meet on its own; a violation is a bug or an impossible GPU."""
    if group.counter_set is not None:
        counters = group.counter_set["counters"]
        assert isinstance(counters, dict)
        if len(counters) > MAX_COUNTERS_PER_SET:
            raise InventoryError(
                f"GPU {group.index}: {len(counters)} counters exceed the API's {MAX_COUNTERS_PER_SET}"
            )
    for d in group.devices:
        attributes, capacity = d.get("attributes", {}), d.get("capacity", {})
        assert isinstance(attributes, dict) and isinstance(capacity, dict)
        if len(attributes) + len(capacity) > MAX_ATTRIBUTES_AND_CAPACITIES:
            raise InventoryError(
                f"device {d['name']}: more than {MAX_ATTRIBUTES_AND_CAPACITIES} attributes+capacities"
            )


def pack_devices(devices: Sequence[Json]) -> list[list[Json]]:
    """Cut the ordered devices into slices of at most the API's limit, keeping their order."""
    limit = _device_limit(devices)
    return [list(devices[i : i + limit]) for i in range(0, len(devices), limit)]


def _reduced(group: GpuDevices) -> GpuDevices:
    if group.counter_set is None:
        return group
    counter_set, devices = reduce_counters(group.counter_set, group.devices)
    return GpuDevices(group.index, counter_set, devices)


def _slice(node_name: str, k: int, generation: int, count: int, body: Json) -> Json:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "metadata": {"name": resource_slice_name(node_name, k)},
        "spec": {
            "driver": DRIVER_NAME,
            "nodeName": node_name,
            "pool": {"name": node_name, "generation": generation, "resourceSliceCount": count},
            **body,
        },
    }


def build_slices(
    inventory: Inventory,
    settings: NodeSettings,
    *,
    owned_placements: Collection[Placement] = frozenset(),
    degraded: bool = False,
    generation: int = 1,
    taints: GpuTaints | None = None,
    taints_supported: bool = True,
) -> list[Json]:
    """The pool's slices: counter-set slices first, then device slices, named `<node>-gpu.tessera.dev-<k>`.

    `owned_placements`: MIG placements Tessera created (from the checkpoint); other live instances are an
    administrator's. `degraded`: whole GPUs only and no counters, for API servers without the
    partitionable-devices / consumable-capacity features. `taints`: GPU UUID → the taints every device of
    that GPU carries (default: from the faults the inventory reports, `dra_driver.core.taints`); where the API
    server cannot keep taints (`taints_supported` false: DeviceTaints off), a tainted GPU offers nothing.
    """
    gpu_taints = inventory_taints(inventory) if taints is None else taints
    groups = []
    for g in sorted(inventory.gpus, key=lambda g: g.index):
        group = gpu_devices(g, inventory, settings, owned=owned_placements, degraded=degraded)
        marks = gpu_taints.get(g.uuid, ())
        if marks and not taints_supported:
            group = GpuDevices(g.index, None, ())
        elif marks:
            group = GpuDevices(group.index, group.counter_set, tainted(group.devices, marks))
        groups.append(group)
    for group in groups:
        _check(group)
    groups = [_reduced(g) for g in groups]
    devices = order_devices([d for g in groups for d in g.devices], settings.device_order)
    counter_sets = [g.counter_set for g in groups if g.counter_set is not None]
    bodies: list[Json] = [
        {"sharedCounters": counter_sets[i : i + MAX_COUNTER_SETS]}
        for i in range(0, len(counter_sets), MAX_COUNTER_SETS)
    ]
    bodies.extend({"devices": chunk} for chunk in pack_devices(devices))
    node = settings.node_name
    return [_slice(node, k, generation, len(bodies), body) for k, body in enumerate(bodies)]


def device_names(slices: Sequence[Json]) -> list[str]:
    """Every device name in the slices, in order (for CLI summaries and tests)."""
    names: list[str] = []
    for s in slices:
        spec = s["spec"]
        assert isinstance(spec, dict)
        for d in spec.get("devices", []):
            names.append(str(d["name"]))
    return names
