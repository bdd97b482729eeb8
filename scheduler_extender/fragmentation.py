"""Node scores by the fragmentation a placement would cause (the FGD idea: Weng et al., "Beware of
Fragmentation", USENIX ATC '23), pure: GPUs, CPU and memory left, and requests in, scores out.

A node's fragmentation for a mix of typical requests is the expected share of its free GPU capacity that a
request drawn from the mix could not use: all of it when the node cannot take the request at all (too little
CPU or memory left beside its GPUs, as FGD counts it, or its GPUs do not fit the request); otherwise, for a
share of one GPU, the free capacity of every GPU that cannot take it (too little left, or no share left); for
N whole GPUs, the free capacity of the GPUs already partly used (a whole claim takes only untouched GPUs). A
pod is best placed where its placement raises that the least. Capacity is in thousandths of a GPU, CPU in
millicores, memory in bytes.

Inside a node the scheduler's allocator places, not this module: a share goes to the first GPU in the
node's order that takes it (Tessera's device order packs shares from GPU 0, docs/scheduling.md), whole GPUs
to untouched GPUs, which are alike for this measure.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, replace

from dra_driver.vocabulary.errors import ConfigError

MILLI = 1000  # a whole GPU
MAX_SCORE = 10  # the scheduler extender API's MaxExtenderPriority


@dataclass(frozen=True, slots=True)
class Gpu:
    """One GPU of a node: its free capacity (0..1000) and how many more shares it takes."""

    free: int = MILLI
    shares_left: int = 10

    def __post_init__(self) -> None:
        if not 0 <= self.free <= MILLI:
            raise ConfigError(f"a GPU's free capacity is 0..{MILLI} thousandths, not {self.free}")
        if self.shares_left < 0:
            raise ConfigError(f"a GPU's shares left cannot be negative ({self.shares_left})")

    @property
    def untouched(self) -> bool:
        return self.free == MILLI


@dataclass(frozen=True, slots=True, order=True)
class Share:
    """A share of one GPU, in thousandths (1..999)."""

    milli: int

    def __post_init__(self) -> None:
        if not 0 < self.milli < MILLI:
            raise ConfigError(f"a share is 1..{MILLI - 1} thousandths of a GPU, not {self.milli}")


@dataclass(frozen=True, slots=True, order=True)
class Whole:
    """N whole GPUs of one node."""

    count: int

    def __post_init__(self) -> None:
        if self.count < 1:
            raise ConfigError(f"a whole-GPU request asks for at least one GPU, not {self.count}")


Demand = Share | Whole


@dataclass(frozen=True, slots=True)
class Typical:
    """A typical request of the mix: its GPUs, and the CPU (millicores) and memory (bytes) it asks beside."""

    gpu: Demand
    cpu_milli: int = 0
    memory: int = 0

    def __post_init__(self) -> None:
        if self.cpu_milli < 0 or self.memory < 0:
            raise ConfigError(
                f"a request's CPU and memory cannot be negative ({self.cpu_milli}, {self.memory})"
            )


Mix = Mapping[Typical, float]  # typical request → how often it occurs


@dataclass(frozen=True, slots=True)
class Room:
    """What a node has left for more pods: CPU in millicores, memory in bytes (negative: overcommitted)."""

    cpu_milli: int
    memory: int

    def holds(self, cpu_milli: int, memory: int) -> bool:
        return cpu_milli <= self.cpu_milli and memory <= self.memory

    def less(self, cpu_milli: int, memory: int) -> Room:
        return Room(cpu_milli=self.cpu_milli - cpu_milli, memory=self.memory - memory)


def takes(gpu: Gpu, share: Share) -> bool:
    return gpu.free >= share.milli and gpu.shares_left > 0


def taken(gpu: Gpu, share: Share) -> Gpu:
    """`gpu` once `share` is placed on it (it must take it)."""
    return replace(gpu, free=gpu.free - share.milli, shares_left=gpu.shares_left - 1)


def fits(gpus: Sequence[Gpu], demand: Demand) -> bool:
    if isinstance(demand, Share):
        return any(takes(g, demand) for g in gpus)
    return sum(1 for g in gpus if g.untouched) >= demand.count


def unusable(gpus: Sequence[Gpu], demand: Demand) -> int:
    """The node's free capacity (thousandths) that `demand` could not use."""
    if not fits(gpus, demand):
        return sum(g.free for g in gpus)
    if isinstance(demand, Share):
        return sum(g.free for g in gpus if not takes(g, demand))
    return sum(g.free for g in gpus if not g.untouched)


def fragmentation(gpus: Sequence[Gpu], mix: Mix, room: Room | None = None) -> float:
    """The expected unusable free GPU capacity for a request drawn from `mix`. `room`: what the node has
    left of its CPU and memory (None: not known, and then not weighed)."""
    total = sum(w for w in mix.values() if w > 0)
    free = sum(g.free for g in gpus)
    if total <= 0 or free == 0:
        return 0.0
    by_gpu: dict[Demand, int] = {}  # many typical requests share a GPU shape
    value = 0.0
    for typical, weight in mix.items():
        if weight <= 0:
            continue
        if room is not None and not room.holds(typical.cpu_milli, typical.memory):
            value += weight * free
            continue
        lost = by_gpu.get(typical.gpu)
        if lost is None:
            lost = by_gpu[typical.gpu] = unusable(gpus, typical.gpu)
        value += weight * lost
    return value / total


def place(gpus: Sequence[Gpu], demand: Demand) -> tuple[Gpu, ...] | None:
    """The node's GPUs once `demand` is placed as the allocator would place it; None if it does not fit."""
    if not fits(gpus, demand):
        return None
    placed = list(gpus)
    if isinstance(demand, Share):
        i = next(i for i, g in enumerate(placed) if takes(g, demand))
        placed[i] = taken(placed[i], demand)
        return tuple(placed)
    left = demand.count
    for i in reversed(range(len(placed))):  # the last untouched GPUs, as Tessera's device order gives them
        if left and placed[i].untouched:
            placed[i] = replace(placed[i], free=0, shares_left=0)
            left -= 1
    return tuple(placed)


def free_after(gpus: Sequence[Gpu], demand: Demand | None) -> int | None:
    """The node's free GPU capacity (thousandths) once `demand` is placed (None: a pod without a GPU);
    None where it does not fit."""
    after = tuple(gpus) if demand is None else place(gpus, demand)
    return None if after is None else sum(g.free for g in after)


def growth(
    gpus: Sequence[Gpu],
    demand: Demand | None,
    mix: Mix,
    *,
    room: Room | None = None,
    cpu_milli: int = 0,
    memory: int = 0,
) -> float | None:
    """How much placing a pod raises the node's fragmentation: its GPUs, `demand` (None: it asks for
    none), and, where the node's `room` is known, its `cpu_milli` and `memory`. None: it does not fit."""
    after = tuple(gpus) if demand is None else place(gpus, demand)
    if after is None or (room is not None and not room.holds(cpu_milli, memory)):
        return None
    left = None if room is None else room.less(cpu_milli, memory)
    return fragmentation(after, mix, left) - fragmentation(gpus, mix, room)


def node_scores(grown: Mapping[str, float | None], *, unit: float | None = None) -> dict[str, int]:
    """0..MAX_SCORE per node from its `growth`: MAX_SCORE where the placement raises fragmentation the
    least, 0 where it does not fit (None). Between them, with `unit` (thousandths of a GPU), one point less
    for every `unit` more growth than the least, so that nodes nearly alike score alike and the scheduler's
    other scores decide between them; without it, linear from the least growth (MAX_SCORE) to the most (0),
    MAX_SCORE for every node that fits when they are all alike."""
    if unit is not None and unit <= 0:
        raise ConfigError(f"a score unit is a positive number of thousandths of a GPU, not {unit}")
    values = [g for g in grown.values() if g is not None]
    if not values:
        return dict.fromkeys(grown, 0)
    low, high = min(values), max(values)
    if unit is not None:
        return {
            name: 0 if g is None else max(0, MAX_SCORE - round((g - low) / unit)) for name, g in grown.items()
        }
    span = high - low
    return {
        name: 0 if g is None else MAX_SCORE if span <= 1e-9 else round(MAX_SCORE * (high - g) / span)
        for name, g in grown.items()
    }


def fill_scores(scores: Mapping[str, int], left: Callable[[str], int | None]) -> dict[str, int]:
    """0..MAX_SCORE per node, the tie-break among the nodes that `scores` (node_scores') scores highest: the
    node left with the least free GPU capacity once the pod is placed (`left`, thousandths, asked of those
    nodes only) MAX_SCORE, the next value one point less, and so on; 0 for every other node (node_scores
    gives a node the pod does not fit 0, never the best). Ranks, not a scale, so that the fullest node
    stands out however many nodes tie (docs/scheduling.md, "The fill score")."""
    best = max(scores.values(), default=0)
    if best <= 0:
        return dict.fromkeys(scores, 0)
    lefts = {name: left(name) for name, s in scores.items() if s == best}
    ranked = sorted({v for v in lefts.values() if v is not None})
    rank = {v: max(0, MAX_SCORE - i) for i, v in enumerate(ranked)}
    return {name: 0 if (v := lefts.get(name)) is None else rank[v] for name in scores}
