"""`python -m e2e.benches.extender_cost` (`make bench-extender`): what one `prioritize` call of the scheduler
extender costs at the production trace's size, in process (no control plane, no HTTP).

A node per trace node (../shared/traces/openb's node list, or `--nodes`; `--sizes` samples it as the
trace bench does), its ResourceSlices those the node plugin's slice builder gives its GPUs
(e2e.benches.trace.publishers), its Node object its CPU and memory; about half of its GPUs allocated
(seeded: a request of one GPU drawn from the extender's shipped mix, a share or the whole GPU), each claim
with a bound pod asking for the request's CPU and memory. The objects are fed as dicts to the very stores
the extender's watches fill (admission.watch.Watched, through a listing). Then a pod asking for a share
and one asking for a whole GPU are scored, every node named (`nodeCacheCapable`), `--calls` times after a
first call, three ways: `uncached`, every object re-read per call (`prioritize`, the extender before issue
#32); `views`, the node views (scheduler_extender.node_views) and the same pod every call (a ReplicaSet's
pods one after another); `views-new`, the views and another CPU and memory request every call; `fill-new`,
the same for the `fill` verb (the shipped configuration's second extender stanza, a second call per pod).
The views' answers are checked against the full read's on the first and last call of each.

    extender-cost nodes=1213 gpus=6212 objects=… pod=share path=views first=…ms median=…ms p95=…ms calls=50

`--smoke` (`make bench-extender SMOKE=1`): the trace slice's 2 nodes, 3 calls, every line printed.
"""

from __future__ import annotations

import argparse
import random
import statistics
import sys
import threading
import time
from collections.abc import Callable, Generator, Mapping, Sequence
from pathlib import Path
from typing import Any

from admission.watch import Watched
from dra_driver.core.slices import build_slices
from dra_driver.io.logs import configure
from dra_driver.io.settings_file import load_settings
from e2e.benches.trace.gpu_models import model, share_of
from e2e.benches.trace.inputs import DEFAULT_NODES, SLICE
from e2e.benches.trace.publishers import inventory_of
from e2e.benches.trace.records import TraceNode, parse_nodes
from e2e.benches.trace.replay import sample_cluster
from scheduler_extender.__main__ import UNIT, keep_claim, read_mix
from scheduler_extender.fragmentation import Mix, Share, Whole
from scheduler_extender.mix import MIB
from scheduler_extender.node_room import keep_node, keep_pod
from scheduler_extender.node_views import NodeViews, watch_into
from scheduler_extender.prioritize import Scoring, Verb, prioritize

Obj = dict[str, Any]
Answer = Callable[[Mapping[str, Any], Verb], list[dict[str, Any]]]
NAMESPACE = "bench"
DRIVER = "gpu.tessera.dev"


def _claim(name: str, request: Obj, result: Obj | None = None) -> Obj:
    claim: Obj = {
        "metadata": {"namespace": NAMESPACE, "name": name},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}},
    }
    if result is not None:
        results = [{"driver": DRIVER, "request": "gpu", **result}]
        claim["status"] = {"allocation": {"devices": {"results": results}}}
    return claim


def _pod(name: str, *, claim: str, cpu_milli: int, memory_mib: int, node: str | None) -> Obj:
    requests = {"cpu": f"{cpu_milli}m", "memory": f"{memory_mib}Mi"}
    spec: Obj = {
        "containers": [{"name": "main", "resources": {"requests": requests}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
    }
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"namespace": NAMESPACE, "name": name}, "spec": spec, "status": {"phase": "Running"}}


def cluster_objects(nodes: Sequence[TraceNode], *, seed: int, mix: Mix) -> dict[str, list[Obj]]:
    """The cluster's ResourceSlices, ResourceClaims, Nodes and Pods as the API server lists them: each GPU
    allocated with probability 1/2 to a request of one GPU drawn from `mix` by its weights (a share of the
    drawn size, or the whole GPU), each claim with a pod bound to the node asking for the request's CPU and
    memory (at most the node's per GPU)."""
    rng = random.Random(seed)
    singles = [(t, w) for t, w in mix.items() if w > 0 and (isinstance(t.gpu, Share) or t.gpu == Whole(1))]
    kinds, weights = [t for t, _ in singles], [w for _, w in singles]
    found: dict[str, list[Obj]] = {"slices": [], "claims": [], "nodes": [], "pods": []}
    for n in nodes:
        found["nodes"].append(
            {
                "metadata": {"name": n.name},
                "status": {"allocatable": {"cpu": f"{n.cpu_milli}m", "memory": f"{n.memory_mib}Mi"}},
            }
        )
        if not n.gpus:
            continue
        found["slices"].extend(build_slices(inventory_of(n), load_settings(None, n.name)))
        product = model(n.model)
        for i in range(n.gpus):
            if rng.random() >= 0.5:
                continue
            name = f"{n.name}-gpu-{i}"
            typical = rng.choices(kinds, weights)[0]
            if isinstance(typical.gpu, Share):
                share = share_of(product, typical.gpu.milli)
                asks = {"memory": f"{share.memory_mib}Mi", "cores": str(share.cores)}
                request: Obj = {"deviceClassName": "vgpu.tessera.dev", "capacity": {"requests": asks}}
                result = {"pool": n.name, "device": f"gpu-{i}-vgpu", "consumedCapacity": asks}
            else:
                request = {"deviceClassName": "gpu.tessera.dev", "count": 1}
                result = {"pool": n.name, "device": f"gpu-{i}"}
            found["claims"].append(_claim(name, request, result))
            cpu = min(n.cpu_milli // n.gpus, typical.cpu_milli)
            memory = min(n.memory_mib // n.gpus, typical.memory // MIB)
            found["pods"].append(_pod(name, claim=name, cpu_milli=cpu, memory_mib=memory, node=n.name))
    return found


class _Listing:
    """A list (the first call of a watch), then a watch with nothing to say until `done`."""

    def __init__(self, items: list[Obj], done: threading.Event) -> None:
        self._body: Obj = {"items": items, "metadata": {"resourceVersion": "1"}}
        self._done = done

    def page(self, *, limit: int, token: str | None) -> Obj:
        return self._body

    def events(self, *, version: str, timeout_s: int) -> Generator[Obj, None, None]:
        self._done.wait()
        yield from ()


def _ms(values: Sequence[float]) -> str:
    ordered = sorted(values)
    p95 = ordered[min(len(ordered) - 1, max(0, round(0.95 * len(ordered)) - 1))]
    return f"median={statistics.median(ordered):.1f}ms p95={p95:.1f}ms"


def measure(nodes: Sequence[TraceNode], *, calls: int, seed: int) -> list[str]:
    """The report's lines for one cluster: per pod and path, the first call and the `calls` after it."""
    scoring = Scoring(mix=read_mix(None), unit=UNIT)
    objects = cluster_objects(nodes, seed=seed, mix=scoring.mix)
    share = share_of(model(nodes[0].model), 300)
    own = {
        "share": _claim(
            "mine-share",
            {
                "deviceClassName": "vgpu.tessera.dev",
                "capacity": {"requests": {"memory": f"{share.memory_mib}Mi", "cores": str(share.cores)}},
            },
        ),
        "whole": _claim("mine-whole", {"deviceClassName": "gpu.tessera.dev", "count": 1}),
    }
    done = threading.Event()
    keeps = {"slices": lambda s: s, "claims": keep_claim, "nodes": keep_node, "pods": keep_pod}
    items = {**objects, "claims": [*objects["claims"], *own.values()]}
    stores = {k: Watched(name=k, source=_Listing(items[k], done), keep=keeps[k]) for k in keeps}
    views = NodeViews()
    watch_into(
        views, slices=stores["slices"], claims=stores["claims"], nodes=stores["nodes"], pods=stores["pods"]
    )
    for store in stores.values():
        store.start()
    try:
        for store in stores.values():
            if not store.wait_synced(120):
                raise RuntimeError(f"the {store.name} store was not filled")

        def uncached(args: Mapping[str, Any], verb: Verb = "prioritize") -> list[dict[str, Any]]:
            return prioritize(
                args,
                slices=stores["slices"].items(),
                claims=stores["claims"].items(),
                lookup=stores["claims"].get,
                scoring=scoring,
                nodes=stores["nodes"].items(),
                pods=stores["pods"].items(),
                verb=verb,
            )

        def cached(args: Mapping[str, Any], verb: Verb = "prioritize") -> list[dict[str, Any]]:
            return views.prioritize(args, lookup=stores["claims"].get, scoring=scoring, verb=verb)

        names = [n.name for n in nodes]
        header = (
            f"extender-cost nodes={len(nodes)} gpus={sum(n.gpus for n in nodes)} "
            f"objects={sum(len(v) for v in objects.values())}"
        )
        paths: tuple[tuple[str, Answer, bool, Verb], ...] = (
            ("uncached", uncached, False, "prioritize"),
            ("views", cached, False, "prioritize"),
            ("views-new", cached, True, "prioritize"),
            ("fill-new", cached, True, "fill"),  # the second stanza's call, the views, another request
        )
        lines = []
        for pod in ("share", "whole"):

            def args_of(k: int, pod: str = pod) -> dict[str, Any]:
                """The pod with the k-th request of CPU and memory (k 0: 4 CPUs, 16 GiB)."""
                body = _pod(
                    f"mine-{pod}",
                    claim=f"mine-{pod}",
                    cpu_milli=4000 + 250 * k,
                    memory_mib=16384 + 512 * k,
                    node=None,
                )
                return {"Pod": body, "NodeNames": names}

            for path, answer, vary, verb in paths:
                times, bodies = [], [args_of(k if vary else 0) for k in range(calls + 1)]
                for body in bodies:
                    started = time.perf_counter()
                    answer(body, verb)
                    times.append((time.perf_counter() - started) * 1000)
                lines.append(
                    f"{header} pod={pod} path={path} first={times[0]:.1f}ms {_ms(times[1:])} calls={calls}"
                )
                print(lines[-1], flush=True)
                for body in (bodies[0], bodies[-1]):
                    if cached(body, verb) != uncached(body, verb):
                        raise RuntimeError(
                            f"the node views answered otherwise than a full read ({pod}, {path})"
                        )
        return lines
    finally:
        done.set()
        for store in stores.values():
            store.stop()


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.extender_cost", description=__doc__)
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="the trace's node list (CSV)")
    parser.add_argument(
        "--sizes", default="0.1,1", help="fractions of the node list, each a sample (replay.sample_cluster)"
    )
    parser.add_argument("--calls", type=int, default=50, help="calls per pod and path, after the first")
    parser.add_argument("--seed", type=int, default=42, help="the fill's seed")
    parser.add_argument("--smoke", action="store_true", help="the trace slice's 2 nodes, 3 calls (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.sizes, args.calls = SLICE / "nodes.csv", "1", 3
    if not args.nodes.is_file():
        parser.error(f"no node list {args.nodes}: give NODES=<node list> (CSV)")
    try:
        fractions = [float(f) for f in args.sizes.split(",") if f.strip()]
    except ValueError:
        parser.error(f"--sizes {args.sizes}: give fractions of the node list, e.g. 0.1,1")
    if args.calls < 1 or not fractions or not all(0 < f <= 1 for f in fractions):
        parser.error("give --calls of 1 or more and --sizes fractions in (0, 1]")
    configure(level="error")
    every = parse_nodes(args.nodes.read_text(encoding="utf-8"), what=str(args.nodes))
    for fraction in fractions:
        nodes, _ = sample_cluster(every, [], fraction=fraction, seed=args.seed)
        measure(nodes, calls=args.calls, seed=args.seed)
    return 0


if __name__ == "__main__":
    sys.exit(main())
