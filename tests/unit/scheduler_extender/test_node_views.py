"""The node views answer as a full read does: over seeded random clusters fed through the real watch stores
(admission.watch.Watched, from a scripted API server), then after random updates and deletes of slices,
claims, Nodes and Pods, `NodeViews.prioritize` gives the very HostPriorityList that `prioritize` gives from
every object the stores hold."""

from __future__ import annotations

import itertools
import queue
import random
import threading
from collections.abc import Generator
from typing import Any

import pytest

from admission.watch import Watched
from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.core.slices import build_slices
from scheduler_extender.__main__ import keep_claim
from scheduler_extender.fragmentation import Share, Typical, Whole
from scheduler_extender.node_room import keep_node, keep_pod
from scheduler_extender.node_views import NodeViews, watch_into
from scheduler_extender.prioritize import VERBS, Scoring, prioritize
from tests.support.inventories import make_gpu, make_inventory

Obj = dict[str, Any]
NODES = [f"n{i}" for i in range(7)]
MIX = {
    Typical(Whole(1), cpu_milli=4000, memory=8 << 30): 3.0,
    Typical(Share(250), cpu_milli=2000, memory=4 << 30): 5.0,
    Typical(Share(600), cpu_milli=8000): 1.0,
    Typical(Whole(2)): 1.0,
}


class _Server:
    """Lists `items`, then answers each watch with the next batch of events put in `batches`."""

    def __init__(self, items: list[Obj]) -> None:
        self.listing = {"items": items, "metadata": {"resourceVersion": "1"}}
        self.batches: queue.Queue[list[Obj]] = queue.Queue()
        self.watches = 0
        self.lock = threading.Lock()
        self.closed = threading.Event()

    def page(self, *, limit: int, token: str | None) -> Obj:
        return self.listing

    def events(self, *, version: str, timeout_s: int) -> Generator[Obj, None, None]:
        with self.lock:
            self.watches += 1
        while True:
            try:
                yield from self.batches.get(timeout=0.05)
                return
            except queue.Empty:
                if self.closed.is_set():  # the test is over: empty watches until the store stops
                    return

    def send(self, events: list[tuple[str, Obj]]) -> None:
        """The events, applied (the store has asked for the next watch) when this returns."""
        with self.lock:
            seen = self.watches
        self.batches.put([{"type": t, "object": o} for t, o in events])
        for _ in range(2000):
            with self.lock:
                if self.watches > seen:
                    return
            threading.Event().wait(0.005)
        raise AssertionError("the store did not apply the events")


def _slices(rng: random.Random, node: str) -> list[Obj]:
    model = rng.choice(["L4", "L4", "H100-80GB-PCIE"])
    inventory = make_inventory(*(make_gpu(i, model) for i in range(rng.randint(1, 3))))
    settings = NodeSettings(node_name=node, family=family_settings(sharesPerGpu=rng.choice([2, 10])))
    return build_slices(inventory, settings)


def _claim(rng: random.Random, name: str, slices: dict[str, list[Obj]]) -> Obj:
    pool = rng.choice([*slices, "gone"])
    devices = [d["name"] for s in slices.get(pool, []) for d in s["spec"].get("devices") or []] or ["gpu-0"]
    results = []
    for _ in range(rng.randint(1, 2)):
        device = rng.choice(devices)
        result: Obj = {
            "driver": rng.choice(["gpu.tessera.dev"] * 5 + ["other"]),
            "pool": pool,
            "device": device,
        }
        if device.endswith(("-vgpu", "-mps")):
            result["consumedCapacity"] = {
                "cores": str(rng.randint(0, 60)),
                "memory": f"{rng.randint(1, 30)}Gi",
            }
        results.append(result)
    request = {"name": "gpu", "exactly": {"deviceClassName": "gpu.tessera.dev", "count": 1}}
    claim: Obj = {"metadata": {"namespace": "ns", "name": name}, "spec": {"devices": {"requests": [request]}}}
    if rng.random() < 0.8:
        claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


def _node(rng: random.Random, name: str) -> Obj:
    allocatable = {"cpu": str(rng.choice([8, 16, 32])), "memory": f"{rng.choice([32, 64])}Gi"}
    return {"metadata": {"name": name}, "status": {"allocatable": allocatable}}


def _pod(rng: random.Random, name: str, *, own: Obj | None = None) -> Obj:
    requests = {"cpu": f"{rng.randint(1, 12)}", "memory": f"{rng.randint(1, 24)}Gi"}
    spec: Obj = {"containers": [{"name": "c", "resources": {"requests": requests}}]}
    if own is not None:
        spec["resourceClaims"] = [{"name": "g", "resourceClaimName": own["metadata"]["name"]}]
    else:
        spec["nodeName"] = rng.choice([*NODES, "elsewhere"])
    phase = rng.choice(["Running"] * 4 + ["Succeeded"])
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": {"phase": phase}}


MINE = {
    "share": {"deviceClassName": "vgpu.tessera.dev", "capacity": {"requests": {"cores": "30"}}},
    "share-by-memory": {"deviceClassName": "vgpu.tessera.dev", "capacity": {"requests": {"memory": "20Gi"}}},
    "whole": {"deviceClassName": "gpu.tessera.dev", "count": 1},
    "two": {"deviceClassName": "gpu.tessera.dev", "count": 2},
}


def _mine() -> list[Obj]:
    return [
        {
            "metadata": {"namespace": "ns", "name": f"mine-{k}"},
            "spec": {"devices": {"requests": [{"name": "g", "exactly": r}]}},
        }
        for k, r in MINE.items()
    ]


def _compare(stores: dict[str, Watched], views: NodeViews, rng: random.Random) -> int:
    """Every pod of MINE and one without a GPU, scored both ways with each scoring; the calls compared."""
    names = [*NODES, "unknown"]
    rng.shuffle(names)
    compared = 0
    for own in [*_mine(), None]:
        pod = _pod(rng, "me", own=own)
        args = {"Pod": pod, "NodeNames": names}
        for scoring, verb in itertools.product(
            (Scoring(mix=MIX, unit=100), Scoring(mix=MIX, unit=None, cpu_pods=True)), VERBS
        ):
            full = prioritize(
                args,
                slices=stores["slices"].items(),
                claims=stores["claims"].items(),
                lookup=stores["claims"].get,
                scoring=scoring,
                nodes=stores["nodes"].items(),
                pods=stores["pods"].items(),
                verb=verb,
            )
            answer = views.prioritize(args, lookup=stores["claims"].get, scoring=scoring, verb=verb)
            assert answer == full, (own, scoring, verb)
            compared += any(s["Score"] for s in full)
    return compared


def _change(
    rng: random.Random, kind: str, objects: dict[str, dict[str, Obj]], slices: dict[str, list[Obj]]
) -> list[tuple[str, Obj]]:
    """One random change to `objects[kind]`, as the watch reports it: a node's pool republished (other
    GPUs, other shares: its slices modified, those it no longer has deleted), an object deleted, or one
    modified or added (claims re-allocated, Nodes resized, pods moved or finished)."""
    name = rng.choice(list(objects[kind]) or ["none"])
    if kind == "slices" and rng.random() < 0.5:
        node = rng.choice(NODES)
        fresh = {s["metadata"]["name"]: s for s in _slices(rng, node)}
        gone = [
            s for n, s in objects["slices"].items() if s["spec"]["pool"]["name"] == node and n not in fresh
        ]
        for s in gone:
            del objects["slices"][s["metadata"]["name"]]
        objects["slices"].update(fresh)
        return [("DELETED", s) for s in gone] + [("MODIFIED", s) for s in fresh.values()]
    if name in objects[kind] and rng.random() < 0.3:
        return [("DELETED", objects[kind].pop(name))]
    name = name if rng.random() < 0.8 else f"new-{rng.random()}"
    if kind == "slices":
        made = rng.choice(_slices(rng, rng.choice(NODES)))
    elif kind == "claims":
        made = _claim(rng, name, slices)
    elif kind == "nodes":
        made = _node(rng, rng.choice(NODES))
    else:
        made = _pod(rng, name)
    objects[kind][made["metadata"]["name"]] = made
    return [("MODIFIED", made)]


@pytest.mark.parametrize("seed", range(6))
def test_the_views_answer_as_a_full_read_through_updates_and_deletes(seed: int) -> None:
    rng = random.Random(seed)
    slices = {n: _slices(rng, n) for n in NODES[:-1]}  # the last node has no GPUs
    objects: dict[str, dict[str, Obj]] = {
        "slices": {s["metadata"]["name"]: s for ss in slices.values() for s in ss},
        "claims": {f"c{i}": _claim(rng, f"c{i}", slices) for i in range(14)},
        "nodes": {n: _node(rng, n) for n in NODES if rng.random() < 0.85},
        "pods": {f"p{i}": _pod(rng, f"p{i}") for i in range(12)},
    }
    keeps = {"slices": lambda s: s, "claims": keep_claim, "nodes": keep_node, "pods": keep_pod}
    servers = {k: _Server([*objects[k].values(), *(_mine() if k == "claims" else [])]) for k in keeps}
    stores = {k: Watched(name=k, source=servers[k], keep=keeps[k]) for k in keeps}
    views = NodeViews()
    watch_into(
        views, slices=stores["slices"], claims=stores["claims"], nodes=stores["nodes"], pods=stores["pods"]
    )
    for store in stores.values():
        store.start()
    try:
        assert all(s.wait_synced(10) for s in stores.values())
        scored = _compare(stores, views, rng)
        for _ in range(40):
            kind = rng.choice(list(keeps))
            servers[kind].send(_change(rng, kind, objects, slices))
            scored += _compare(stores, views, rng)
        assert scored > 10  # the clusters are told apart, not all scored 0
    finally:
        for server in servers.values():
            server.closed.set()
        for store in stores.values():
            store.stop()
