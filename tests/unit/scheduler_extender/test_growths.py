"""Growths remembered: each answer is `fragmentation.growth`'s, whatever was asked before it (nodes whose
rooms hold the same requests of the mix share a value; rooms that differ in one request do not)."""

from __future__ import annotations

from functools import partial

from hypothesis import given, settings
from hypothesis import strategies as st

from scheduler_extender.fragmentation import MILLI, Demand, Gpu, Room, Share, Typical, Whole, growth
from scheduler_extender.growths import Growths

gpus_st = st.lists(
    st.builds(Gpu, free=st.sampled_from([0, 250, 500, 750, MILLI]), shares_left=st.integers(0, 2)),
    min_size=1,
    max_size=4,
).map(tuple)
demand_st: st.SearchStrategy[Demand | None] = st.one_of(
    st.none(), st.builds(Share, milli=st.sampled_from([250, 500])), st.builds(Whole, count=st.integers(1, 2))
)
typical_st = st.builds(
    Typical,
    gpu=st.one_of(
        st.builds(Share, milli=st.sampled_from([250, 500])), st.builds(Whole, count=st.integers(1, 2))
    ),
    cpu_milli=st.sampled_from([0, 1000, 4000]),
    memory=st.sampled_from([0, 1 << 30, 8 << 30]),
)
mix_st = st.dictionaries(typical_st, st.floats(0.1, 10), min_size=1, max_size=5)
room_st = st.one_of(  # on both sides of the mix's amounts, and on them
    st.none(),
    st.builds(
        Room,
        cpu_milli=st.sampled_from([-1, 0, 500, 1000, 3000, 4000, 9000]),
        memory=st.sampled_from([-1, 0, 1 << 29, 1 << 30, 4 << 30, 8 << 30, 16 << 30]),
    ),
)
ask_st = st.tuples(room_st, st.sampled_from([0, 500, 2000]), st.sampled_from([0, 1 << 30]))


@settings(max_examples=300, deadline=None)
@given(mix_st, st.lists(st.tuples(gpus_st, demand_st), min_size=1, max_size=3), st.lists(ask_st, max_size=20))
def test_every_growth_is_the_uncached_one_in_any_order_of_asking(
    mix: dict[Typical, float],
    nodes: list[tuple[tuple[Gpu, ...], Demand | None]],
    asks: list[tuple[Room | None, int, int]],
) -> None:
    """A few nodes' GPUs and demands, each asked with many rooms (so that keys meet), forwards and back."""
    growths = Growths(mix)
    for gpus, demand in nodes:
        for room, cpu, memory in [*asks, *reversed(asks)]:
            kept = growths.growth(
                gpus,
                demand,
                room=room,
                cpu_milli=cpu,
                memory=memory,
                before=partial(growths.before, gpus, room),
            )
            assert kept == growth(gpus, demand, mix, room=room, cpu_milli=cpu, memory=memory)
