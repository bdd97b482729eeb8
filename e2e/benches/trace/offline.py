"""The trace's protocol replayed offline (pure): kube-scheduler's default scores and Tessera's scheduler
extender modelled over the trace's nodes, no control plane, so that a lever of the extender (its formula, its
weight against the default plugins, its mix of typical requests) is measured in seconds before a real run
(`make bench-trace-offline`, docs/performance.md).

The model:
- a node is the trace's: its CPU and memory allocatable, its GPUs, each with 10 shares (the default
  `sharesPerGpu`); a pod fits where its CPU and memory fit and its GPUs do (whole GPUs on untouched ones, a
  share on a GPU with that much left), on a model its `gpu_spec` allows;
- inside a node Tessera's device order places (`scheduler_extender.fragmentation.place`: a share on the
  first GPU that takes it, whole GPUs from the last), or, as a lever (`INSIDE`), the fullest GPU that takes
  it or FGD's own choice;
- every feasible node is scored (`percentageOfNodesToScore: 100`) by what tells the trace's nodes apart
  in kube-scheduler 1.37's default profile: NodeResourcesFit LeastAllocated on CPU and memory (weight 1),
  NodeResourcesBalancedAllocation (1), DynamicResources (2: the `firstAvailable` alternative a share gets,
  the bench's claims listing one per model of the cluster in sorted order, e2e.benches.trace.kube_objects);
  the extender adds its 0 to 10 times its weight times 10, as kube-scheduler adds an extender's. The highest
  total wins, ties broken by the seeded generator (kube-scheduler's own is another).
The extender's score is its own code (`scheduler_extender.fragmentation`) on the model's nodes, its
growths remembered as the extender remembers them (`scheduler_extender.growths`: nodes alike cost one
computation, so a seed of the full cluster takes a minute or two, not half an hour). What the
model leaves out: the allocator's exact capacity arithmetic (MiB and percent rounding of a share), and
kube-scheduler's random tie-breaks, so a seed here is not the real run's; docs/performance.md sets the two
side by side.
"""

from __future__ import annotations

import math
import random
from collections import Counter
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Literal, get_args

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
    fill_scores,
    fits,
    fragmentation,
    free_after,
    node_scores,
    place,
    taken,
    takes,
)
from scheduler_extender.growths import MAX_KEPT, Growths, Ranks
from scheduler_extender.mix import MIB
from scheduler_extender.prioritize import unfilled

SHARES_PER_GPU = 10
# Where a share goes inside its node: "first", the first GPU that takes it in Tessera's published order (the
# allocator's first fit, today); "best-fit", the GPU with the least free capacity that takes it (first fit
# over an order republished by free capacity); "fgd", the GPU whose share raises the node's fragmentation the
# least (FGD's own choice; no device order gives it). Whole GPUs: untouched ones, alike for the measure.
Inside = Literal["first", "best-fit", "fgd"]
INSIDE: tuple[Inside, ...] = get_args(Inside)
# The order a share's claim lists its alternatives, one per GPU model (DynamicResources prefers the first):
# "name", sorted by name (the bench's claims); "few-gpus", the models of fewest GPUs per node first (a
# share then goes where a whole GPU is least wanted, among nodes alike for the extender); "many-gpus",
# the other way round.
ModelOrder = Literal["name", "few-gpus", "many-gpus"]
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
    cpu_unit: float | None = None  # the unit for pods without a GPU, where it differs from `unit`
    spread: bool = True  # the default profile's NodeResourcesFit and BalancedAllocation scores
    spread_cpu_pods: bool = False  # those scores for pods without a GPU even when not `spread`
    pack: bool = False  # NodeResourcesFit MostAllocated on CPU and memory (weight 1) in place of `spread`
    dra_score: bool = True  # DynamicResources' score (its firstAvailable preference)
    fgd_policy: bool = False  # FGD's own policy: the least growth wins, no other score (not kube-scheduler)
    inside: Inside = "first"  # where a share goes inside the node (INSIDE)
    fgd_sigmoid: float | None = None  # with fgd_policy: FGD's own truncated score (sigmoid_score)
    model_order: ModelOrder = "name"  # the order of a share's firstAvailable alternatives (model_order)
    whole_order: ModelOrder | None = None  # whole-GPU claims listing one alternative per model too
    dra_weight: int = 2  # DynamicResources' score weight (kube-scheduler's default: 2)
    fill_weight: int = 0  # the extender's fill score (`/fill`) as a second extender at this weight; 0: none


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


def most_allocated(used: int, capacity: int) -> int:
    return 0 if capacity <= 0 or used > capacity else used * MAX_SCORE // capacity


def packing_score(node: ModelNode, pod: TracePod) -> int:
    """NodeResourcesFit, MostAllocated strategy, CPU and memory weighted 1 each, the pod counted in."""
    cpu, memory = node.cpu + pod.cpu_milli, node.memory + pod.memory_mib
    return (most_allocated(cpu, node.trace.cpu_milli) + most_allocated(memory, node.trace.memory_mib)) // 2


def default_score(node: ModelNode, pod: TracePod) -> int:
    """NodeResourcesFit (LeastAllocated, CPU and memory weighted 1 each) plus BalancedAllocation, the pod
    counted in."""
    cpu, memory = node.cpu + pod.cpu_milli, node.memory + pod.memory_mib
    fit = (least_allocated(cpu, node.trace.cpu_milli) + least_allocated(memory, node.trace.memory_mib)) // 2
    fractions = [min(1.0, cpu / node.trace.cpu_milli), min(1.0, memory / node.trace.memory_mib)]
    balanced = int((1 - abs(fractions[0] - fractions[1]) / 2) * MAX_SCORE)
    return fit + balanced


def first_available_scores(
    nodes: Sequence[ModelNode],
    pod: TracePod,
    models: Sequence[str],
    whole: Sequence[str] | None = None,
    *,
    weight: int = 2,
) -> list[int]:
    """DynamicResources' score, normalized to 0..100 (integer, as kube-scheduler's DefaultNormalizeScore) and
    weighted: a share's claim lists one alternative per model it may use, and an earlier one scores higher
    (FIRST_AVAILABLE_MAX - its index); a whole-GPU claim too where `whole` gives its order."""
    listed = models if pod.ask is Ask.SHARE else whole if pod.ask is Ask.WHOLE else None
    allowed = [m for m in listed or () if not pod.gpu_spec or m in pod.gpu_spec]
    if len(allowed) < 2:
        return [0] * len(nodes)
    raw = [FIRST_AVAILABLE_MAX - allowed.index(n.trace.model) for n in nodes]
    top = max(raw)
    return [weight * (MAX_SCORE * r // top) for r in raw]


def learned_mix(placed: Counter[Typical], own: Typical | None) -> dict[Typical, float]:
    mix = {t: float(n) for t, n in placed.most_common(LEARNED_KINDS)}
    if own is not None:
        mix[own] = mix.get(own, 0.0) + 1
    return mix


def growths(
    nodes: Sequence[ModelNode], pod: TracePod, lever: Lever, mix: Mix, memo: Memo | None = None
) -> dict[str, float | None]:
    """How much placing `pod` raises each node's fragmentation (None: its GPUs do not take it). `memo`:
    the growths against a fixed mix, remembered (nodes alike cost one computation; the same floats)."""
    demand = demand_of(pod)
    memory = pod.memory_mib * MIB
    grown: dict[str, float | None] = {}
    for n in nodes:
        room = n.room() if lever.cpu_memory else None
        if lever.inside == "fgd" and memo is not None:
            least = least_growth(n, pod, mix, room, memo)
            grown[n.trace.name] = None if least is None else least[0]
            continue
        if memo is not None and lever.mix is not None:
            before = _before(n, mix, room)
            grown[n.trace.name] = memo.growth(
                n.gpus, demand, room=room, cpu_milli=pod.cpu_milli, memory=memory, before=before
            )
            continue
        after = n.gpus if demand is None else place(n.gpus, demand)
        if after is None:
            grown[n.trace.name] = None
            continue
        left = None if room is None else room.less(pod.cpu_milli, memory)
        if n.before is None or lever.mix is None:
            n.before = fragmentation(n.gpus, mix, room)
        grown[n.trace.name] = fragmentation(after, mix, left) - n.before
    return grown


LeastKey = tuple[tuple[Gpu, ...], Demand | None, Ranks, Ranks]


class Memo(Growths):
    """The growths of one replay against its lever's fixed mix, and FGD's choices inside a node."""

    def __init__(self, mix: Mix) -> None:
        super().__init__(mix)
        self.least: dict[LeastKey, tuple[float, tuple[Gpu, ...]]] = {}


def least_growth(
    node: ModelNode, pod: TracePod, mix: Mix, room: Room | None, memo: Memo
) -> tuple[float, tuple[Gpu, ...]] | None:
    """FGD's choice inside `node`: the least growth over the GPUs that take the pod's share, and the GPUs
    after it (a whole-GPU or CPU-only pod has one placement); None where it does not fit."""
    demand = demand_of(pod)
    left = None if room is None else room.less(pod.cpu_milli, pod.memory_mib * MIB)
    key = (node.gpus, demand, memo.ranks(room), memo.ranks(left))
    found = memo.least.get(key)
    if found is not None:
        return found
    if demand is None or isinstance(demand, Whole):
        after = node.gpus if demand is None else place(node.gpus, demand)
        options = [] if after is None else [after]
    else:
        options = [
            _canonical((*node.gpus[:i], taken(g, demand), *node.gpus[i + 1 :]))
            for i, g in enumerate(node.gpus)
            if takes(g, demand) and g not in node.gpus[:i]
        ]
    if not options:
        return None
    before = _before(node, mix, room)()
    best = min(((fragmentation(a, mix, left) - before, a) for a in options), key=lambda v: v[0])
    if len(memo.least) >= MAX_KEPT:
        memo.least.clear()
    memo.least[key] = best
    return best


def _canonical(gpus: tuple[Gpu, ...]) -> tuple[Gpu, ...]:
    """The GPUs ordered by free capacity, least first (the order "best-fit" republishes; fragmentation does
    not depend on the order, so nodes alike meet in the memo)."""
    return tuple(sorted(gpus, key=lambda g: (g.free, g.shares_left)))


def _before(node: ModelNode, mix: Mix, room: Room | None) -> Callable[[], float]:
    def before() -> float:
        if node.before is None:
            node.before = fragmentation(node.gpus, mix, room)
        return node.before

    return before


def extender_scores(
    nodes: Sequence[ModelNode], pod: TracePod, lever: Lever, mix: Mix, memo: Memo | None = None
) -> list[int]:
    demand = demand_of(pod)
    if lever.weight <= 0 or (demand is None and not lever.cpu_pods):
        return [0] * len(nodes)
    unit = lever.cpu_unit if lever.cpu_unit is not None and demand is None else lever.unit
    grown = growths(nodes, pod, lever, mix, memo)
    scores = node_scores(grown, unit=unit)
    points = [scores[n.trace.name] * lever.weight * 10 for n in nodes]
    if lever.fill_weight <= 0 or unfilled("fill", demand):  # the extender's own rule for whole-GPU pods
        return points
    by_name = {n.trace.name: n for n in nodes}
    filled = fill_scores(scores, lambda name: free_after(by_name[name].gpus, demand))
    return [p + filled[n.trace.name] * lever.fill_weight * 10 for p, n in zip(points, nodes, strict=True)]


def totals(
    nodes: Sequence[ModelNode],
    pod: TracePod,
    lever: Lever,
    mix: Mix,
    models: Sequence[str],
    *,
    memo: Memo | None = None,
    whole_models: Sequence[str] | None = None,
) -> list[float]:
    """Each candidate's total score, the highest wins: kube-scheduler's plugins' and the extender's, or for
    `fgd_policy` the growth alone, unscaled (the least wins)."""
    if lever.fgd_policy:
        grown = growths(nodes, pod, lever, mix, memo)
        if lever.fgd_sigmoid is not None:
            return [
                -math.inf if (g := grown[n.trace.name]) is None else sigmoid_score(g, pod, lever)
                for n in nodes
            ]
        return [-math.inf if (g := grown[n.trace.name]) is None else -g for n in nodes]
    spread = lever.spread or (lever.spread_cpu_pods and pod.ask is Ask.CPU)
    return [
        d + f + e
        for d, f, e in zip(
            (default_score(n, pod) if spread else packing_score(n, pod) if lever.pack else 0 for n in nodes),
            first_available_scores(nodes, pod, models, whole_models, weight=lever.dra_weight)
            if lever.dra_score
            else [0] * len(nodes),
            extender_scores(nodes, pod, lever, mix, memo),
            strict=True,
        )
    ]


def sigmoid_score(growth: float, pod: TracePod, lever: Lever) -> int:
    """FGD's node score as its simulator computes it: 0..100, the sigmoid of the fragmentation it removes in
    whole GPUs, truncated, so that nodes within a few hundredths of a GPU tie (and chance decides). Its
    fragmentation weighs the typical requests by their share of all pods, those without a GPU included (each
    counts a node's whole free GPU capacity, wherever a pod goes): `fgd_sigmoid` is that share of GPU pods."""
    share = lever.fgd_sigmoid or 1.0
    removed = -(growth * share - (1 - share) * pod.request_milli)
    return int(100 / (1 + math.exp(-removed / 1000)))


def _place(node: ModelNode, pod: TracePod, lever: Lever, mix: Mix, memo: Memo | None) -> None:
    demand = demand_of(pod)
    if demand is not None:
        if lever.inside == "fgd" and memo is not None:
            least = least_growth(node, pod, mix, node.room() if lever.cpu_memory else None, memo)
            after = None if least is None else least[1]
        else:
            after = place(node.gpus, demand)
        assert after is not None  # it was feasible
        node.gpus = after if lever.inside == "first" else _canonical(after)
    node.cpu += pod.cpu_milli
    node.memory += pod.memory_mib
    node.before = None


def model_order(nodes: Sequence[TraceNode], order: ModelOrder) -> list[str]:
    """The cluster's GPU models in the order a claim lists them as alternatives (ModelOrder): a share's
    (`Lever.model_order`), and a whole-GPU claim's where `Lever.whole_order` gives one."""
    per_node: dict[str, list[int]] = {}
    for n in nodes:
        if n.gpus:
            per_node.setdefault(n.model, []).append(n.gpus)
    named = sorted(per_node)
    if order == "name":
        return named
    typical = {m: sorted(counts)[len(counts) // 2] for m, counts in per_node.items()}
    return sorted(named, key=lambda m: typical[m] if order == "few-gpus" else -typical[m])


def replay_offline(
    nodes: Sequence[TraceNode], arrivals: Sequence[Arrival], lever: Lever, *, seed: int
) -> list[tuple[int, bool]]:
    """(requested GPU-milli, placed?) of each arrival, in order, as e2e.benches.trace.replay.curve takes
    them."""
    state = [
        ModelNode(trace=n, gpus=tuple(Gpu(shares_left=SHARES_PER_GPU) for _ in range(n.gpus))) for n in nodes
    ]
    models = model_order(nodes, lever.model_order)
    whole_models = None if lever.whole_order is None else model_order(nodes, lever.whole_order)
    rng = random.Random(seed)
    placed: Counter[Typical] = Counter()
    memo = None if lever.mix is None else Memo(lever.mix)
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
            scored = totals(candidates, pod, lever, mix, models, memo=memo, whole_models=whole_models)
            best = max(scored)
            chosen = rng.choice([n for n, t in zip(candidates, scored, strict=True) if t == best])
        _place(chosen, pod, lever, mix, memo)
        if own is not None:
            placed[own] += 1
        outcomes.append((pod.request_milli, True))
    return outcomes
