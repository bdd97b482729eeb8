"""The trace's protocol replayed offline (pure): kube-scheduler's default scores and Tessera's scheduler
extender modelled over the trace's nodes, no control plane, so that a lever of the extender (its formula, its
weight against the default plugins, its mix of typical requests) is measured in seconds before a real run
(`make bench-trace-offline`, docs/performance.md).

The model:
- a node is the trace's: its CPU and memory allocatable, its GPUs, each with 10 shares (the default
  `sharesPerGpu`); a pod fits where its CPU and memory fit and its GPUs do (whole GPUs on untouched ones, a
  share on a GPU with that much left), on a model its `gpu_spec` allows;
- inside a node Tessera's device order places (`scheduler_extender.fragmentation.place`: a share on the
  first GPU that takes it, whole GPUs from the last);
- every feasible node is scored (`percentageOfNodesToScore: 100`) by what tells the trace's nodes apart
  in kube-scheduler 1.37's default profile: NodeResourcesFit LeastAllocated on CPU and memory (weight 1),
  NodeResourcesBalancedAllocation (1), DynamicResources (2: the `firstAvailable` alternative a share gets,
  the bench's claims listing one per model of the cluster in sorted order, e2e.benches.trace.kube_objects);
  the extender adds its 0 to 10 times its weight times 10, as kube-scheduler adds an extender's. The highest
  total wins, ties broken by the seeded generator (kube-scheduler's own is another).
The extender's score is its own code (`scheduler_extender.fragmentation`) on the model's nodes. What the
model leaves out: the allocator's exact capacity arithmetic (MiB and percent rounding of a share), and
kube-scheduler's random tie-breaks, so a seed here is not the real run's; docs/performance.md sets the two
side by side.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Sequence
from dataclasses import dataclass

from e2e.benches.trace.records import Ask, TraceNode, TracePod
from e2e.benches.trace.replay import Arrival
from scheduler_extender.fragmentation import (
    Demand,
    Gpu,
    Mix,
    Room,
    Share,
    Typical,
    Whole,
    fits,
    fragmentation,
    node_scores,
    place,
)
from scheduler_extender.mix import MIB

SHARES_PER_GPU = 10
MAX_SCORE = 100  # a plugin's
FIRST_AVAILABLE_MAX = 8  # resourceapi.FirstAvailableDeviceRequestMaxSize
LEARNED_KINDS = 32


@dataclass(frozen=True, slots=True)
class Lever:
    """One way of scoring: `weight` 0 is kube-scheduler alone; else the extender at that weight, counting
    CPU and memory (`cpu_memory`, FGD's measure) or GPUs alone, against `mix` (None: the shapes of the
    pods placed so far and the pod's own, as the extender weighed before it had a configured mix), and
    scoring pods that ask for no GPU too when `cpu_pods`; its 0-10 from the growths by `unit`."""

    name: str
    weight: int = 0
    cpu_memory: bool = True
    mix: Mix | None = None
    cpu_pods: bool = False
    unit: float | None = None  # node_scores' unit (None: min-max)
    spread: bool = True  # the default profile's NodeResourcesFit and BalancedAllocation scores
    spread_cpu_pods: bool = False  # those scores for pods without a GPU even when not `spread`
    dra_score: bool = True  # DynamicResources' score (its firstAvailable preference)
    fgd_policy: bool = False  # FGD's own policy: the least growth wins, no other score (not kube-scheduler)


@dataclass(slots=True)
class ModelNode:
    """A trace node as the replay has filled it so far."""

    trace: TraceNode
    gpus: tuple[Gpu, ...]
    cpu: int = 0  # millicores requested by its pods
    memory: int = 0  # MiB
    before: float | None = None  # its fragmentation, while nothing changes on it and the mix is fixed

    def room(self) -> Room:
        return Room(
            cpu_milli=self.trace.cpu_milli - self.cpu, memory=(self.trace.memory_mib - self.memory) * MIB
        )


def demand_of(pod: TracePod) -> Demand | None:
    if pod.ask is Ask.SHARE:
        return Share(pod.gpu_milli)
    return Whole(pod.num_gpu) if pod.ask is Ask.WHOLE else None


def typical_of(pod: TracePod) -> Typical | None:
    demand = demand_of(pod)
    return None if demand is None else Typical(demand, cpu_milli=pod.cpu_milli, memory=pod.memory_mib * MIB)


def feasible(node: ModelNode, pod: TracePod) -> bool:
    if (
        node.cpu + pod.cpu_milli > node.trace.cpu_milli
        or node.memory + pod.memory_mib > node.trace.memory_mib
    ):
        return False
    demand = demand_of(pod)
    if demand is None:
        return True
    if pod.gpu_spec and node.trace.model not in pod.gpu_spec:
        return False
    return fits(node.gpus, demand)


def least_allocated(used: int, capacity: int) -> int:
    return 0 if capacity <= 0 or used > capacity else (capacity - used) * MAX_SCORE // capacity


def default_score(node: ModelNode, pod: TracePod) -> int:
    """NodeResourcesFit (LeastAllocated, CPU and memory weighted 1 each) plus BalancedAllocation, the pod
    counted in."""
    cpu, memory = node.cpu + pod.cpu_milli, node.memory + pod.memory_mib
    fit = (least_allocated(cpu, node.trace.cpu_milli) + least_allocated(memory, node.trace.memory_mib)) // 2
    fractions = [min(1.0, cpu / node.trace.cpu_milli), min(1.0, memory / node.trace.memory_mib)]
    balanced = int((1 - abs(fractions[0] - fractions[1]) / 2) * MAX_SCORE)
    return fit + balanced


def first_available_scores(nodes: Sequence[ModelNode], pod: TracePod, models: Sequence[str]) -> list[int]:
    """DynamicResources' score, normalized to 0..100 and weighted 2: a share's claim lists one alternative
    per model it may use, and an earlier one scores higher (FIRST_AVAILABLE_MAX - its index)."""
    allowed = [m for m in models if not pod.gpu_spec or m in pod.gpu_spec]
    if pod.ask is not Ask.SHARE or len(allowed) < 2:
        return [0] * len(nodes)
    raw = [FIRST_AVAILABLE_MAX - allowed.index(n.trace.model) for n in nodes]
    top = max(raw)
    return [2 * MAX_SCORE * r // top for r in raw]


def learned_mix(placed: Counter[Typical], own: Typical | None) -> dict[Typical, float]:
    mix = {t: float(n) for t, n in placed.most_common(LEARNED_KINDS)}
    if own is not None:
        mix[own] = mix.get(own, 0.0) + 1
    return mix


def growths(nodes: Sequence[ModelNode], pod: TracePod, lever: Lever, mix: Mix) -> dict[str, float | None]:
    """How much placing `pod` raises each node's fragmentation (None: its GPUs do not take it)."""
    demand = demand_of(pod)
    grown: dict[str, float | None] = {}
    for n in nodes:
        room = n.room() if lever.cpu_memory else None
        after = n.gpus if demand is None else place(n.gpus, demand)
        if after is None:
            grown[n.trace.name] = None
            continue
        left = None if room is None else room.less(pod.cpu_milli, pod.memory_mib * MIB)
        if n.before is None or lever.mix is None:
            n.before = fragmentation(n.gpus, mix, room)
        grown[n.trace.name] = fragmentation(after, mix, left) - n.before
    return grown


def extender_scores(nodes: Sequence[ModelNode], pod: TracePod, lever: Lever, mix: Mix) -> list[int]:
    if lever.weight <= 0 or (demand_of(pod) is None and not lever.cpu_pods):
        return [0] * len(nodes)
    scores = node_scores(growths(nodes, pod, lever, mix), unit=lever.unit)
    return [scores[n.trace.name] * lever.weight * 10 for n in nodes]


def totals(
    nodes: Sequence[ModelNode], pod: TracePod, lever: Lever, mix: Mix, models: Sequence[str]
) -> list[float]:
    """Each candidate's total score, the highest wins: kube-scheduler's plugins' and the extender's, or for
    `fgd_policy` the growth alone, unscaled (the least wins)."""
    if lever.fgd_policy:
        grown = growths(nodes, pod, lever, mix)
        return [-math.inf if (g := grown[n.trace.name]) is None else -g for n in nodes]
    spread = lever.spread or (lever.spread_cpu_pods and pod.ask is Ask.CPU)
    return [
        d + f + e
        for d, f, e in zip(
            (default_score(n, pod) if spread else 0 for n in nodes),
            first_available_scores(nodes, pod, models) if lever.dra_score else [0] * len(nodes),
            extender_scores(nodes, pod, lever, mix),
            strict=True,
        )
    ]


def _place(node: ModelNode, pod: TracePod) -> None:
    demand = demand_of(pod)
    if demand is not None:
        after = place(node.gpus, demand)
        assert after is not None  # it was feasible
        node.gpus = after
    node.cpu += pod.cpu_milli
    node.memory += pod.memory_mib
    node.before = None


def replay_offline(
    nodes: Sequence[TraceNode], arrivals: Sequence[Arrival], lever: Lever, *, seed: int
) -> list[tuple[int, bool]]:
    """(requested GPU-milli, placed?) of each arrival, in order, as e2e.benches.trace.replay.curve takes
    them."""
    state = [
        ModelNode(trace=n, gpus=tuple(Gpu(shares_left=SHARES_PER_GPU) for _ in range(n.gpus))) for n in nodes
    ]
    models = sorted({n.model for n in nodes if n.gpus})
    rng = random.Random(seed)
    placed: Counter[Typical] = Counter()
    outcomes: list[tuple[int, bool]] = []
    for arrival in arrivals:
        pod = arrival.pod
        candidates = [n for n in state if feasible(n, pod)]
        if not candidates:
            outcomes.append((pod.request_milli, False))
            continue
        own = typical_of(pod)
        mix = lever.mix if lever.mix is not None else learned_mix(placed, own)
        if len(candidates) == 1:  # kube-scheduler scores nothing then
            chosen = candidates[0]
        else:
            scored = totals(candidates, pod, lever, mix, models)
            best = max(scored)
            chosen = rng.choice([n for n, t in zip(candidates, scored, strict=True) if t == best])
        _place(chosen, pod)
        if own is not None:
            placed[own] += 1
        outcomes.append((pod.request_milli, True))
    return outcomes
