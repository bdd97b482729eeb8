"""What every family's devices publish the same way (pure): the GPU's attributes, quantities, counters.

One counter set per GPU (`gpu-<i>-counters`: one counter per memory slice, plus the GPU's SMs, engines and
memory) lets the scheduler keep families mutually exclusive on one GPU: a whole GPU or a software slice
consumes all of it, a MIG placement its slices and engines. DESIGN: docs/architecture.md, "The slice model".
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from enum import StrEnum

from dra_driver.core.families.base import Json
from dra_driver.vocabulary.errors import ConfigError, InventoryError
from dra_driver.vocabulary.inventory import Gpu, Inventory, MigInstance, MigProfile
from dra_driver.vocabulary.names import (
    NUMA_NODE_ATTRIBUTE,
    PCI_BUS_ID_ATTRIBUTE,
    PCIE_ROOT_ATTRIBUTE,
    Attr,
    Counter,
    Family,
    counter_set_name,
    memory_slice_counter,
    qualified,
)
from dra_driver.vocabulary.semver import parse_semver

MIB = 1024 * 1024
MAX_STRING = 64  # the API's limit on a string attribute


def attribute_version(version: str) -> str:
    """An NVML version as a DRA `version` attribute (semver): "9.0" → "9.0.0", "535.104.05" → "535.104.5"."""
    try:
        return str(parse_semver(version.strip(), normalize=True))
    except ConfigError as e:
        raise InventoryError(f"version {version!r} reported by the driver is not a version number") from e


def pci_bus_id(bus_id: str) -> str:
    """NVML's `00000000:18:00.0` as the standard attribute writes it: `0000:18:00.0`."""
    domain, sep, rest = bus_id.strip().lower().partition(":")
    if not sep or not all(c in "0123456789abcdef" for c in domain):
        return bus_id.strip().lower()
    return f"{int(domain, 16):04x}:{rest}"


def mib_quantity(n_bytes: int) -> str:
    return f"{n_bytes // MIB}Mi" if n_bytes % MIB == 0 else str(n_bytes)


def string(value: str) -> Json:
    return {"string": value[:MAX_STRING]}


def attribute(device: Json, name: str) -> object:
    """The value of a published device's attribute `name` (unqualified), whatever its type; None if absent."""
    value = (device.get("attributes") or {}).get(qualified(name))
    return None if not isinstance(value, dict) or not value else next(iter(value.values()))


def gpu_attributes(gpu: Gpu, inventory: Inventory, family: Family) -> Json:
    """The attributes every device of a GPU carries, `type` first."""
    return {
        qualified(Attr.TYPE): string(family),
        qualified(Attr.PRODUCT_NAME): string(gpu.product_name),
        qualified(Attr.BRAND): string(gpu.brand),
        qualified(Attr.ARCHITECTURE): string(gpu.architecture.value),
        qualified(Attr.CUDA_COMPUTE_CAPABILITY): {"version": attribute_version(gpu.cuda_compute_capability)},
        qualified(Attr.DRIVER_VERSION): {"version": attribute_version(inventory.driver_version)},
        qualified(Attr.CUDA_DRIVER_VERSION): {"version": attribute_version(inventory.cuda_driver_version)},
        qualified(Attr.INDEX): {"int": gpu.index},
        PCI_BUS_ID_ATTRIBUTE: string(pci_bus_id(gpu.pci_bus_id)),
    }


# ---- topology (docs/topology.md) ------------------------------------------------------------------------


class NumaForm(StrEnum):
    """How `resource.kubernetes.io/numaNode` is written (KEP-6072): an int, which every release accepts, or
    the list (own node first, then the nodes at the nearest distance) that needs DRAListTypeAttributes (alpha,
    off by default) on every component; the administrator chooses, and where the API server does not keep the
    list the publisher falls back to the int (`scalar_numa`)."""

    SCALAR = "scalar"
    LIST = "list"


NVSWITCH_DOMAIN = "nvswitch"  # one NVSwitch fabric per board: every GPU whose links end at a switch


def topology_attributes(gpu: Gpu, numa_form: NumaForm = NumaForm.SCALAR) -> Json:
    """The standard attributes of where a GPU sits, for every device of the GPU (a MIG instance, a vgpu or an
    MPS share sits where its GPU sits); each left out where the node does not say, as upstream does."""
    attrs: Json = {}
    if gpu.pcie_root is not None:
        attrs[PCIE_ROOT_ATTRIBUTE] = string(gpu.pcie_root)
    if gpu.numa_node is not None:
        nodes = [gpu.numa_node, *gpu.numa_near]
        scalar = numa_form is NumaForm.SCALAR
        attrs[NUMA_NODE_ATTRIBUTE] = {"int": gpu.numa_node} if scalar else {"ints": nodes}
    return attrs


def has_numa_list(slices: Sequence[Json]) -> bool:
    """Whether any device of `slices` publishes `resource.kubernetes.io/numaNode` list-valued."""
    return any("ints" in (d.get("attributes") or {}).get(NUMA_NODE_ATTRIBUTE, {}) for d in _devices(slices))


def scalar_numa(slices: Sequence[Json]) -> list[Json]:
    """`slices` with every list-valued numaNode written as an int, the device's own node (the list's first):
    what an API server without DRAListTypeAttributes keeps, so `matchAttribute` on numaNode still works."""
    out = [copy.deepcopy(dict(s)) for s in slices]
    for d in _devices(out):
        value = (d.get("attributes") or {}).get(NUMA_NODE_ATTRIBUTE)
        if value is not None and value.get("ints"):
            d["attributes"][NUMA_NODE_ATTRIBUTE] = {"int": value["ints"][0]}
    return out


def numa_list_unkept(answers: Sequence[str]) -> bool:
    """Whether the API server's answers to a write (fields it dropped, or why it refused a slice) name
    numaNode: without DRAListTypeAttributes it drops the list, and 1.36/1.37 refuse the emptied attribute."""
    return any(NUMA_NODE_ATTRIBUTE in a for a in answers)


def _devices(slices: Sequence[Json]) -> list[Json]:
    return [d for s in slices for d in (s.get("spec") or {}).get("devices") or []]


def nvlink_domain(gpu: Gpu, inventory: Inventory) -> str | None:
    """The value GPUs that talk over NVLink share: the fabric's cluster and clique where the GPU joined one
    (across nodes), the board's NVSwitch domain where its links end at switches (an NVSwitch is not a peer
    GPU: NVML's remote device type says which), else the GPUs joined by bridges (`gpus-0-1`); None without
    NVLink."""
    if gpu.fabric is not None:
        return f"{gpu.fabric.cluster_uuid}.{gpu.fabric.clique_id}"
    if gpu.nvlinks.switch:
        return NVSWITCH_DOMAIN
    if not gpu.nvlinks.peers:
        return None
    known = {g.index: g for g in inventory.gpus}
    seen, todo = {gpu.index}, [gpu.index]
    while todo:  # the bridged GPUs reachable from this one: a pair, or a ring of 4
        here = known.get(todo.pop())
        for peer in here.nvlinks.peers if here is not None else ():
            if peer in known and peer not in seen:
                seen.add(peer)
                todo.append(peer)
    return "gpus-" + "-".join(str(i) for i in sorted(seen))


def nvlink_attributes(gpu: Gpu, inventory: Inventory) -> Json:
    """What a whole GPU publishes of its NVLinks and fabric (docs/topology.md says why only whole GPUs)."""
    attrs: Json = {}
    domain = nvlink_domain(gpu, inventory)
    if domain is not None:
        attrs[qualified(Attr.NVLINK_DOMAIN)] = string(domain)
    if gpu.fabric is not None:
        attrs[qualified(Attr.FABRIC_CLUSTER_UUID)] = string(gpu.fabric.cluster_uuid)
        attrs[qualified(Attr.FABRIC_CLIQUE_ID)] = {"int": gpu.fabric.clique_id}
    return attrs


# ---- counters -------------------------------------------------------------------------------------------


def profile_counters(p: MigProfile) -> dict[str, int]:
    return {
        Counter.MULTIPROCESSORS: p.multiprocessors,
        Counter.COPY_ENGINES: p.copy_engines,
        Counter.DECODERS: p.decoders,
        Counter.ENCODERS: p.encoders,
        Counter.JPEG_ENGINES: p.jpeg_engines,
        Counter.OFA_ENGINES: p.ofa_engines,
        Counter.MEMORY: p.memory_mib * MIB,
    }


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
    consume counters themselves). Counters at zero are left out."""
    totals: dict[str, int] = {memory_slice_counter(k): 1 for k in range(gpu.memory_slice_count)}
    remaining = _gpu_counters(gpu)
    for inst in admin:
        prof = gpu.profile_by_id(inst.profile_id)
        if prof is not None:
            for name, used in profile_counters(prof).items():
                remaining[name] -= used
    totals.update(remaining)
    return {name: value for name, value in totals.items() if value > 0}


def _quantity(name: str, value: int) -> Json:
    return {"value": mib_quantity(value) if name == Counter.MEMORY else str(value)}


def counters(values: Mapping[str, int]) -> Json:
    return {name: _quantity(name, v) for name, v in sorted(values.items())}


def consumes(gpu: Gpu, values: Mapping[str, int]) -> list[Json]:
    """A device's `consumesCounters`: `values` taken from the GPU's counter set."""
    return [{"counterSet": counter_set_name(gpu.index), "counters": counters(values)}]


def counter_set(gpu: Gpu, totals: Mapping[str, int]) -> Json:
    return {"name": counter_set_name(gpu.index), "counters": counters(totals)}
