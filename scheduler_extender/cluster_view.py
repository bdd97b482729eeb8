"""The cluster as the fragmentation score sees it, read from API objects (pure: dicts in, values out).

- a node's GPUs, from the ResourceSlices Tessera publishes (pool = node name): every device names its GPU by
  `parentUUID` (a share, an MPS client, a MIG placement) or `uuid` (the whole GPU); a GPU's memory and its
  `shares` come from its whole and `vgpu` devices, its place in the node from `index`;
- what is used, from the allocated ResourceClaims (`status.allocation.devices.results`): a whole GPU takes
  all of it; a share takes the larger of its consumed `cores` (percent of the SMs) and its consumed
  `memory` over the GPU's, and one share; a MIG placement its memory over the GPU's;
- a pod's request on a node, from its claims' specs: `count` whole GPUs of `gpu.tessera.dev`, or a share (the
  larger of its `cores` and its `memory` over the node's GPU memory); with `firstAvailable`, the first
  alternative the node could serve: one whose selectors name the node's GPU model, or no model (a selector
  on `productName` whose every quoted name is neither the node's product name nor a start of it is read as
  naming another model: the allocator would pass it over there).

Objects are untrusted: a field of the wrong type is read as absent, never raised on.
"""

from __future__ import annotations

import math
import re
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import (
    ATTRIBUTE_DOMAIN,
    CLASS_DOMAIN,
    DRIVER_NAME,
    Attr,
    Cap,
    Family,
    device_class_name,
)
from dra_driver.vocabulary.quantity import parse_quantity
from scheduler_extender.fragmentation import MILLI, Demand, Gpu, Share, Whole

Obj = Mapping[str, Any]
WHOLE_CLASS = device_class_name(Family("gpu"))
QUOTED = re.compile(r'"((?:[^"\\]|\\.)*)"|\'((?:[^\'\\]|\\.)*)\'')


@dataclass(frozen=True, slots=True)
class GpuRef:
    """A device's GPU and what the device is."""

    uuid: str
    whole: bool
    memory: int  # the device's memory capacity in bytes (0: none published)


@dataclass(slots=True)
class NodeGpus:
    """One node's GPUs in index order, and which GPU each of its devices is on."""

    order: list[str] = field(default_factory=list)  # GPU UUIDs
    memory: dict[str, int] = field(default_factory=dict)  # bytes
    shares: dict[str, int] = field(default_factory=dict)
    devices: dict[str, GpuRef] = field(default_factory=dict)
    product: str = ""  # the product name of its first GPU

    def gpu_memory(self) -> int:
        """The memory of the node's first GPU: what a share's memory is measured against."""
        return next((self.memory[u] for u in self.order if self.memory.get(u)), 0)


def _map(value: object) -> Obj:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _quantity(value: object) -> int:
    """A capacity value (`{"value": "16Gi"}` or a bare quantity) as a whole number; 0 if unreadable."""
    raw = _map(value).get("value") if isinstance(value, Mapping) else value
    try:
        return max(0, math.ceil(parse_quantity(raw).value))
    except ConfigError:
        return 0


def _attribute(device: Obj, name: str) -> object:
    attrs = _map(device.get("attributes"))
    value = _map(attrs.get(f"{ATTRIBUTE_DOMAIN}/{name}") or attrs.get(name))
    return next(iter(value.values()), None) if len(value) == 1 else None


def read_slices(slices: Iterable[Obj]) -> dict[str, NodeGpus]:
    """Node name → its GPUs, from every Tessera ResourceSlice."""
    nodes: dict[str, NodeGpus] = {}
    indexes: dict[tuple[str, str], int] = {}
    for s in slices:
        spec = _map(s.get("spec"))
        pool = str(_map(spec.get("pool")).get("name") or "")
        if spec.get("driver") != DRIVER_NAME or not pool:
            continue
        node = nodes.setdefault(pool, NodeGpus())
        for raw in _list(spec.get("devices")):
            device = _map(raw)
            name, kind = device.get("name"), _attribute(device, Attr.TYPE)
            uuid = _attribute(device, Attr.PARENT_UUID) or _attribute(device, Attr.UUID)
            if not isinstance(name, str) or not isinstance(uuid, str) or not isinstance(kind, str):
                continue
            capacity = _map(device.get("capacity"))
            memory = _quantity(capacity.get(Cap.MEMORY))
            node.devices[name] = GpuRef(uuid=uuid, whole=kind == "gpu", memory=memory)
            index = _attribute(device, Attr.INDEX)
            if isinstance(index, int) and not isinstance(index, bool):
                indexes.setdefault((pool, uuid), index)
            if kind in ("gpu", "vgpu"):
                product = _attribute(device, Attr.PRODUCT_NAME)
                if isinstance(product, str) and not node.product:
                    node.product = product
                if uuid not in node.memory:
                    node.order.append(uuid)
                node.memory[uuid] = max(node.memory.get(uuid, 0), memory)
            if kind == "vgpu":
                node.shares[uuid] = _quantity(capacity.get(Cap.SHARES))
    for pool, node in nodes.items():
        node.order.sort(key=lambda u, p=pool: indexes.get((p, u), 1 << 20))  # type: ignore[misc]
    return nodes


def share_milli(*, cores: int, memory: int, gpu_memory: int) -> int:
    """A share's thousandths of a GPU: the larger of its SM percent and its part of the memory."""
    by_memory = math.ceil(memory * MILLI / gpu_memory) if gpu_memory > 0 else 0
    return min(MILLI, max(cores * 10, by_memory))


@dataclass(frozen=True, slots=True)
class Held:
    """One allocated device: its node, its GPU, the thousandths it takes, whether it is a share."""

    node: str
    uuid: str
    milli: int
    share: bool


def _results(claim: Obj) -> list[Obj]:
    allocation = _map(_map(claim.get("status")).get("allocation"))
    return [_map(r) for r in _list(_map(allocation.get("devices")).get("results"))]


def held(claim: Obj, nodes: Mapping[str, NodeGpus]) -> list[Held]:
    """What one allocated claim holds of the nodes' GPUs (nothing if it is not allocated)."""
    found: list[Held] = []
    for r in _results(claim):
        pool, device = str(r.get("pool") or ""), str(r.get("device") or "")
        node = nodes.get(pool)
        ref = node.devices.get(device) if node is not None and r.get("driver") == DRIVER_NAME else None
        if node is None or ref is None:
            continue
        gpu_memory = node.memory.get(ref.uuid, 0)
        consumed = _map(r.get("consumedCapacity"))
        if ref.whole:
            found.append(Held(pool, ref.uuid, MILLI, share=False))
        elif consumed:
            milli = share_milli(
                cores=_quantity(consumed.get(Cap.CORES)),
                memory=_quantity(consumed.get(Cap.MEMORY)),
                gpu_memory=gpu_memory,
            )
            found.append(Held(pool, ref.uuid, milli, share=True))
        else:  # a MIG placement: its own memory
            found.append(
                Held(pool, ref.uuid, share_milli(cores=0, memory=ref.memory, gpu_memory=gpu_memory), False)
            )
    return found


def node_gpus(node: NodeGpus, holdings: Iterable[Held]) -> tuple[Gpu, ...]:
    """The node's GPUs with what `holdings` (of this node) take from them."""
    used: Counter[str] = Counter()
    shares: Counter[str] = Counter()
    for h in holdings:
        used[h.uuid] += h.milli
        shares[h.uuid] += 1 if h.share else 0
    return tuple(
        Gpu(free=max(0, MILLI - used[u]), shares_left=max(0, node.shares.get(u, 0) - shares[u]))
        for u in node.order
    )


def _names_another_model(alternative: Obj, product: str) -> bool:
    for raw in _list(alternative.get("selectors")):
        expression = _map(_map(raw).get("cel")).get("expression")
        if not isinstance(expression, str) or Attr.PRODUCT_NAME not in expression:
            continue
        names = [a or b for a, b in QUOTED.findall(expression) if (a or b) and (a or b) != ATTRIBUTE_DOMAIN]
        if names and not any(product.startswith(n) for n in names):
            return True
    return False


def _request_on(claim: Obj, product: str) -> Obj | None:
    """The claim's first request, or with `firstAvailable` the first alternative that `product` serves
    (the first alternative when none does)."""
    for raw in _list(_map(_map(claim.get("spec")).get("devices")).get("requests")):
        request = _map(raw)
        if "exactly" in request:
            return _map(request.get("exactly"))
        alternatives = [_map(a) for a in _list(request.get("firstAvailable"))]
        if alternatives:
            served = (a for a in alternatives if not product or not _names_another_model(a, product))
            return next(served, alternatives[0])
    return None


def demand_of(claims: Sequence[Obj], *, node: NodeGpus) -> Demand | None:
    """The pod's request on `node` as the score weighs it, from its claims (the first Tessera request among
    them); None when it asks for no Tessera GPU or for all of a node's."""
    for claim in claims:
        request = _request_on(claim, node.product)
        if request is None or not str(request.get("deviceClassName") or "").endswith(f".{CLASS_DOMAIN}"):
            continue
        if request.get("deviceClassName") == WHOLE_CLASS:
            if request.get("allocationMode", "ExactCount") != "ExactCount":
                return None
            count = request.get("count", 1)
            return (
                Whole(count) if isinstance(count, int) and not isinstance(count, bool) and count > 0 else None
            )
        asks = _map(_map(request.get("capacity")).get("requests"))
        milli = share_milli(
            cores=_quantity(asks.get(Cap.CORES)),
            memory=_quantity(asks.get(Cap.MEMORY)),
            gpu_memory=node.gpu_memory(),
        )
        return Share(milli) if 0 < milli < MILLI else Whole(1) if milli >= MILLI else None
    return None
