"""Each node as the score sees it, kept up to date as watch events arrive, so that a `prioritize` call reads
only the nodes it names (issue #32: re-reading every ResourceSlice, claim, Node and Pod took ~1.1 s a call at
1,213 nodes, against kube-scheduler's 2 s timeout for the extender).

The events of the four watches (ResourceSlices, ResourceClaims, Nodes, Pods, as `__main__` keeps them) are
indexed by node: a pool's slices in the order the store holds them (an event moves an object to the end, as
admission.watch.Watched does), the allocated claims naming a pool, a node's allocatable CPU and memory and
the sums its pods request. An event drops the view of each node it touches (before and after the change);
a call rebuilds a dropped view from that node's objects alone with cluster_view's and node_room's own
functions, and keeps it with the node's fragmentation before placement (for the mix it was computed for)
until the next event on that node. The answer is `prioritize`'s, computed from the same values by the same
functions (tests/unit/scheduler_extender/test_node_views.py compares the two over random clusters and
changes); keep `NodeViews.prioritize` in step with `prioritize.prioritize`.

Every replica builds the same views from the same watches: nothing here is a replica's own state. One caveat
shared with the full read: where two slices of one pool contradict each other (one device name twice), the
answer depends on their order in the store, which a re-list can change without an event.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

from dra_driver.vocabulary.names import DRIVER_NAME
from scheduler_extender.cluster_view import NodeGpus, Obj, demand_of, held, node_gpus, read_slices
from scheduler_extender.fragmentation import Demand, Gpu, Room
from scheduler_extender.growths import Growths
from scheduler_extender.node_room import requests_of
from scheduler_extender.prioritize import (
    ClaimLookup,
    Scoring,
    Verb,
    no_preference,
    node_names,
    pod_claims,
    scores_of,
    unfilled,
)

Key = tuple[str, str]


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def _key(obj: Obj) -> Key:
    metadata = _map(obj.get("metadata"))
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


def _pool(slice_: Obj) -> str | None:
    """The node a slice describes, as read_slices reads it; None: not Tessera's, or no pool."""
    spec = _map(slice_.get("spec"))
    pool = str(_map(spec.get("pool")).get("name") or "")
    return pool if spec.get("driver") == DRIVER_NAME and pool else None


def _claim_pools(claim: Obj) -> frozenset[str]:
    """Every pool the claim's allocation names (held() reads which of them are Tessera's)."""
    results = _map(_map(_map(claim.get("status")).get("allocation")).get("devices")).get("results")
    return frozenset(str(_map(r).get("pool") or "") for r in (results if isinstance(results, list) else []))


@dataclass(slots=True)
class NodeView:
    """One node: its GPUs (None: no Tessera slice), what is free of them, the CPU and memory it has left
    (None: its Node not seen), and its fragmentation before placement against one mix."""

    node: NodeGpus | None
    gpus: tuple[Gpu, ...]
    room: Room | None
    kept: tuple[Growths, float] | None = field(default=None)

    def before(self, growths: Growths) -> float:
        kept = self.kept
        if kept is None or kept[0] is not growths:
            kept = self.kept = (growths, growths.before(self.gpus, self.room))
        return kept[1]

    def growth(self, demand: Demand | None, growths: Growths, *, cpu_milli: int, memory: int) -> float | None:
        return growths.growth(
            self.gpus,
            demand,
            room=self.room,
            cpu_milli=cpu_milli,
            memory=memory,
            before=lambda: self.before(growths),
        )


class NodeViews:
    """The per-node views of the cluster, fed by the watches' events (`on_slice`, `on_claim`, `on_node`,
    `on_pod`: a store's `on_event`), read by `prioritize`. Thread-safe."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._slices: dict[str, dict[Key, Obj]] = {}  # pool → its slices, in the store's order
        self._slice_pool: dict[Key, str] = {}
        self._claims: dict[Key, Obj] = {}
        self._claim_pools: dict[Key, frozenset[str]] = {}
        self._claims_on: dict[str, set[Key]] = {}  # pool → the claims naming it
        self._allocatable: dict[str, tuple[int, int]] = {}  # node → CPU (millicores), memory (bytes)
        self._pods: dict[Key, tuple[str, int, int]] = {}  # pod → its node, CPU, memory
        self._requested: dict[str, tuple[int, int]] = {}  # node → what its pods request
        self._views: dict[str, NodeView] = {}
        self._growths: Growths | None = None

    # ---- events (from the watch threads) ---------------------------------------------------------

    def on_slice(self, kind: str, obj: Obj) -> None:
        key = _key(obj)
        with self._lock:
            before = self._slice_pool.pop(key, None)
            if before is not None:
                self._slices[before].pop(key, None)
                if not self._slices[before]:
                    del self._slices[before]
                self._views.pop(before, None)
            pool = None if kind == "DELETED" else _pool(obj)
            if pool is not None:
                self._slices.setdefault(pool, {})[key] = obj
                self._slice_pool[key] = pool
                self._views.pop(pool, None)

    def on_claim(self, kind: str, obj: Obj) -> None:
        key = _key(obj)
        with self._lock:
            self._claims.pop(key, None)
            for pool in self._claim_pools.pop(key, frozenset()):
                self._claims_on[pool].discard(key)
                if not self._claims_on[pool]:
                    del self._claims_on[pool]
                self._views.pop(pool, None)
            pools = frozenset() if kind == "DELETED" else _claim_pools(obj)
            if pools:
                self._claims[key], self._claim_pools[key] = obj, pools
                for pool in pools:
                    self._claims_on.setdefault(pool, set()).add(key)
                    self._views.pop(pool, None)

    def on_node(self, kind: str, obj: Obj) -> None:
        name = str(_map(obj.get("metadata")).get("name"))
        with self._lock:
            if kind == "DELETED":
                self._allocatable.pop(name, None)
            else:
                self._allocatable[name] = (_int(obj.get("cpu")), _int(obj.get("memory")))
            self._views.pop(name, None)

    def on_pod(self, kind: str, obj: Obj) -> None:
        key = _key(obj)
        with self._lock:
            before = self._pods.pop(key, None)
            if before is not None:
                self._request(*before, sign=-1)
            if kind != "DELETED":
                now = (str(obj.get("node")), _int(obj.get("cpu")), _int(obj.get("memory")))
                self._pods[key] = now
                self._request(*now, sign=1)

    def _request(self, node: str, cpu: int, memory: int, *, sign: int) -> None:
        total_cpu, total_memory = self._requested.get(node, (0, 0))
        self._requested[node] = (total_cpu + sign * cpu, total_memory + sign * memory)
        self._views.pop(node, None)

    # ---- calls -----------------------------------------------------------------------------------

    def view(self, name: str) -> NodeView:
        """The node's view, rebuilt from its objects if an event dropped it."""
        with self._lock:
            found = self._views.get(name)
            if found is None:
                found = self._build(name)
                if found.node is not None or found.room is not None:  # a name of nothing is not kept
                    self._views[name] = found
            return found

    def _build(self, name: str) -> NodeView:
        node = read_slices(self._slices.get(name, {}).values()).get(name)
        gpus: tuple[Gpu, ...] = ()
        if node is not None:
            nodes = {name: node}
            holdings = [h for key in self._claims_on.get(name, ()) for h in held(self._claims[key], nodes)]
            gpus = node_gpus(node, holdings)
        allocatable = self._allocatable.get(name)
        room = None
        if allocatable is not None:
            cpu, memory = self._requested.get(name, (0, 0))
            room = Room(cpu_milli=allocatable[0] - cpu, memory=allocatable[1] - memory)
        return NodeView(node=node, gpus=gpus, room=room)

    def prioritize(
        self, args: Mapping[str, Any], *, lookup: ClaimLookup, scoring: Scoring, verb: Verb = "prioritize"
    ) -> list[dict[str, Any]]:
        """prioritize.prioritize's answer for `verb`, from the views of the named nodes."""
        names = node_names(args)
        pod = _map(args.get("Pod"))
        own = pod_claims(pod, lookup)
        if not own and not scoring.cpu_pods:
            return no_preference(names)
        cpu, memory = requests_of(pod)
        growths = self._growths
        if growths is None or growths.mix is not scoring.mix:
            growths = self._growths = Growths(scoring.mix)
        demands: dict[tuple[str, int], Demand | None] = {}  # demand_of reads a node's model and memory
        grown: dict[str, float | None] = {}
        placed: dict[str, tuple[tuple[Gpu, ...], Demand | None]] = {}
        for name in names:
            view = self.view(name)
            node, demand = view.node, None
            if node is not None and own:
                model = (node.product, node.gpu_memory())
                if model not in demands:
                    demands[model] = demand_of(own, node=node)
                demand = demands[model]
            if own and demand is None:  # not a node of Tessera's GPUs, or a request not weighed
                grown[name] = None
                continue
            if unfilled(verb, demand):
                return no_preference(names)
            placed[name] = (view.gpus, demand)
            grown[name] = view.growth(demand, growths, cpu_milli=cpu, memory=memory)
        if all(g is None for g in grown.values()):
            return no_preference(names)
        scores = scores_of(verb, grown, placed, unit=scoring.unit)
        return [{"Host": n, "Score": scores[n]} for n in names]


class Store(Protocol):
    on_event: Any


def watch_into(views: NodeViews, *, slices: Store, claims: Store, nodes: Store, pods: Store) -> None:
    """Feeds `views` from the four stores' events (before they start)."""
    slices.on_event, claims.on_event = views.on_slice, views.on_claim
    nodes.on_event, pods.on_event = views.on_node, views.on_pod
