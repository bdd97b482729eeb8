"""Node scores by the fragmentation a placement would cause (the FGD idea: Weng et al., "Beware of
Fragmentation", USENIX ATC '23), pure: GPUs and requests in, scores out.

A node's fragmentation for a mix of typical requests is the expected share of its free GPU capacity that a
request drawn from the mix could not use: for a share of one GPU, the free capacity of every GPU that cannot
take it (too little left, or no share left); for N whole GPUs, the free capacity of the GPUs already partly
used (a whole claim takes only untouched GPUs), or all of it when fewer than N are untouched. A pod is best
placed where its placement raises that the least. Capacity is in thousandths of a GPU.

Inside a node the scheduler's allocator places, not this module: a share goes to the first GPU in the
node's order that takes it (Tessera's device order packs shares from GPU 0, docs/scheduling.md), whole GPUs
to untouched GPUs, which are alike for this measure.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
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


def takes(gpu: Gpu, share: Share) -> bool:
    return gpu.free >= share.milli and gpu.shares_left > 0


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


def fragmentation(gpus: Sequence[Gpu], mix: Mapping[Demand, float]) -> float:
    """The expected unusable free capacity for a request drawn from `mix` (demand → weight)."""
    total = sum(w for w in mix.values() if w > 0)
    if total <= 0:
        return 0.0
    return sum(w * unusable(gpus, d) for d, w in mix.items() if w > 0) / total


def place(gpus: Sequence[Gpu], demand: Demand) -> tuple[Gpu, ...] | None:
    """The node's GPUs once `demand` is placed as the allocator would place it; None if it does not fit."""
    if not fits(gpus, demand):
        return None
    placed = list(gpus)
    if isinstance(demand, Share):
        i = next(i for i, g in enumerate(placed) if takes(g, demand))
        placed[i] = replace(
            placed[i], free=placed[i].free - demand.milli, shares_left=placed[i].shares_left - 1
        )
        return tuple(placed)
    left = demand.count
    for i in reversed(range(len(placed))):  # the last untouched GPUs, as Tessera's device order gives them
        if left and placed[i].untouched:
            placed[i] = replace(placed[i], free=0, shares_left=0)
            left -= 1
    return tuple(placed)


def growth(gpus: Sequence[Gpu], demand: Demand, mix: Mapping[Demand, float]) -> float | None:
    """How much placing `demand` on the node raises its fragmentation (None: it does not fit)."""
    after = place(gpus, demand)
    if after is None:
        return None
    return fragmentation(after, mix) - fragmentation(gpus, mix)


def node_scores(grown: Mapping[str, float | None]) -> dict[str, int]:
    """0..MAX_SCORE per node from its `growth`: MAX_SCORE where the placement raises fragmentation the
    least, 0 where it raises it the most or does not fit (None), linear between; MAX_SCORE for every node
    that fits when they are all alike."""
    values = [g for g in grown.values() if g is not None]
    if not values:
        return dict.fromkeys(grown, 0)
    low, high = min(values), max(values)
    span = high - low
    return {
        name: 0 if g is None else MAX_SCORE if span <= 1e-9 else round(MAX_SCORE * (high - g) / span)
        for name, g in grown.items()
    }
