"""`fragmentation.growth`'s values remembered by what decides them, so that nodes alike cost one computation
(pure: a dict in memory).

For a fixed mix, a growth is decided by the node's GPUs, the pod's demand, and which typical requests of the
mix the node's room holds before and after the pod's CPU and memory come off it: `fragmentation` reads a room
only through `Room.holds` of the mix's requests. Which requests a room holds is fixed by how many of the
mix's distinct CPU amounts are at most its CPU and how many of its memory amounts at most its memory: two
rooms with the same two counts hold the same requests, and their growths are the same float, computed by the
same function in the same order. tests/unit/scheduler_extender/test_node_views.py holds the answers to the
uncached `prioritize`'s.
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Callable, Sequence

from scheduler_extender.fragmentation import Demand, Gpu, Mix, Room, fragmentation, place

MAX_KEPT = 100_000  # values kept before they are all dropped (a key is a node's GPUs and four counts)

Ranks = tuple[int, int] | None


class Growths:
    """Growths against one mix, remembered."""

    def __init__(self, mix: Mix) -> None:
        self.mix = mix
        self._cpus = sorted({t.cpu_milli for t in mix})
        self._memories = sorted({t.memory for t in mix})
        self._values: dict[tuple[tuple[Gpu, ...], Demand | None, Ranks, Ranks], float] = {}

    def ranks(self, room: Room | None) -> Ranks:
        """Which requests of the mix `room` holds, as two counts (None: no room known)."""
        if room is None:
            return None
        return bisect_right(self._cpus, room.cpu_milli), bisect_right(self._memories, room.memory)

    def before(self, gpus: Sequence[Gpu], room: Room | None) -> float:
        """The node's fragmentation before placement."""
        return fragmentation(gpus, self.mix, room)

    def growth(
        self,
        gpus: Sequence[Gpu],
        demand: Demand | None,
        *,
        room: Room | None,
        cpu_milli: int,
        memory: int,
        before: Callable[[], float],
    ) -> float | None:
        """`fragmentation.growth(gpus, demand, mix, room=room, cpu_milli=cpu_milli, memory=memory)`;
        `before()`: `self.before(gpus, room)`, which the caller may have kept."""
        if room is not None and not room.holds(cpu_milli, memory):
            return None
        gpus = tuple(gpus)
        left = None if room is None else room.less(cpu_milli, memory)
        key = (gpus, demand, self.ranks(room), self.ranks(left))
        found = self._values.get(key)
        if found is not None:
            return found
        after = gpus if demand is None else place(gpus, demand)
        if after is None:
            return None
        value = fragmentation(after, self.mix, left) - before()
        if len(self._values) >= MAX_KEPT:
            self._values.clear()
        self._values[key] = value
        return value
