"""The fragmentation score: what a request cannot use of a node, where a placement goes, how nodes rank."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.fragmentation import (
    MAX_SCORE,
    MILLI,
    Demand,
    Gpu,
    Room,
    Share,
    Typical,
    Whole,
    fill_scores,
    fits,
    fragmentation,
    free_after,
    growth,
    node_scores,
    place,
    unusable,
)

gpus_st = st.lists(
    st.builds(Gpu, free=st.integers(0, MILLI), shares_left=st.integers(0, 10)), min_size=0, max_size=8
)
demand_st: st.SearchStrategy[Demand] = st.one_of(
    st.builds(Share, milli=st.integers(1, MILLI - 1)), st.builds(Whole, count=st.integers(1, 8))
)
typical_st = st.builds(
    Typical, gpu=demand_st, cpu_milli=st.integers(0, 64_000), memory=st.integers(0, 1 << 38)
)
mix_st = st.dictionaries(typical_st, st.floats(0.1, 100), min_size=1, max_size=6)
room_st = st.one_of(
    st.none(), st.builds(Room, cpu_milli=st.integers(-1000, 96_000), memory=st.integers(-1, 1 << 39))
)


@given(gpus_st, demand_st)
def test_what_a_request_cannot_use_is_part_of_what_is_free(gpus: list[Gpu], demand: Demand) -> None:
    assert 0 <= unusable(gpus, demand) <= sum(g.free for g in gpus)
    if not fits(gpus, demand):
        assert unusable(gpus, demand) == sum(g.free for g in gpus)


@given(gpus_st, demand_st)
def test_a_placement_takes_exactly_the_request(gpus: list[Gpu], demand: Demand) -> None:
    after = place(gpus, demand)
    if not fits(gpus, demand):
        assert after is None
        return
    assert after is not None and len(after) == len(gpus)
    taken = demand.milli if isinstance(demand, Share) else MILLI * demand.count
    assert sum(g.free for g in gpus) - sum(g.free for g in after) == taken
    changed = [i for i, (a, b) in enumerate(zip(gpus, after, strict=True)) if a != b]
    if isinstance(demand, Share):
        # the first GPU that takes it, one share fewer: the allocator's first fit in the node's order
        first = next(i for i, g in enumerate(gpus) if g.free >= demand.milli and g.shares_left > 0)
        assert changed == [first] and after[first].shares_left == gpus[first].shares_left - 1
    else:
        assert len(changed) == demand.count and all(gpus[i].untouched for i in changed)


@given(gpus_st, mix_st, room_st)
def test_fragmentation_is_a_weighted_mean_of_unusable_capacity(
    gpus: list[Gpu], mix: dict[Typical, float], room: Room | None
) -> None:
    value = fragmentation(gpus, mix, room)
    free = sum(g.free for g in gpus)
    # a typical request the node's CPU or memory cannot hold finds all of its free GPUs unusable
    lost = [
        free if room is not None and not room.holds(t.cpu_milli, t.memory) else unusable(gpus, t.gpu)
        for t in mix
    ]
    assert min(lost) - 1e-6 <= value <= max(lost) + 1e-6
    # without the room, CPU and memory are not weighed; with it, never less is lost
    assert fragmentation(gpus, mix) <= value + 1e-6


@given(gpus_st, mix_st, room_st, st.integers(0, 8000), st.integers(0, 1 << 34))
def test_a_pod_that_asks_for_no_gpu_only_strands_gpus(
    gpus: list[Gpu], mix: dict[Typical, float], room: Room | None, cpu: int, memory: int
) -> None:
    grown = growth(gpus, None, mix, room=room, cpu_milli=cpu, memory=memory)
    if room is not None and not room.holds(cpu, memory):
        assert grown is None
        return
    assert grown is not None and grown >= -1e-6  # it frees nothing; it may leave less CPU or memory
    if room is None:
        assert grown == pytest.approx(0.0)


def test_a_share_goes_where_the_cpu_left_beside_the_gpus_is_used_up_anyway() -> None:
    whole = Typical(Whole(1), cpu_milli=8000, memory=0)
    mix = {whole: 1.0}
    # starved: 4 free GPUs but 2 CPUs left, so a typical whole-GPU request fits nowhere on it already
    starved, roomy = [Gpu(), Gpu(), Gpu(), Gpu()], [Gpu(), Gpu(), Gpu(), Gpu()]
    grown = {
        "starved": growth(starved, Share(500), mix, room=Room(2000, 1 << 34), cpu_milli=1000),
        "roomy": growth(roomy, Share(500), mix, room=Room(64_000, 1 << 34), cpu_milli=1000),
    }
    # starved: all 4000 was unusable, 3500 still is; roomy: a half-used GPU is lost to whole requests
    assert grown == {"starved": pytest.approx(-500.0), "roomy": pytest.approx(500.0)}
    assert node_scores(grown) == {"starved": MAX_SCORE, "roomy": 0}
    # counting GPUs alone, both open a fresh GPU alike
    assert growth(starved, Share(500), mix) == growth(roomy, Share(500), mix) == pytest.approx(500.0)


def test_a_share_that_fills_a_gpu_up_fragments_less_than_one_that_opens_a_new_gpu() -> None:
    mix = {Typical(Whole(1)): 1.0, Typical(Share(500)): 1.0}
    # node a: GPU 0 half used; the share fills it exactly. node b: untouched GPUs; the share opens one.
    a = [Gpu(free=500, shares_left=9), Gpu()]
    b = [Gpu(), Gpu()]
    grown_a, grown_b = growth(a, Share(500), mix), growth(b, Share(500), mix)
    assert grown_a is not None and grown_b is not None
    # on a: the half-free GPU was unusable to a whole GPU; filled, nothing new is lost
    assert grown_a == pytest.approx(-500 / 2)  # it was unusable to Whole(1) only; now it is gone
    # on b: a fresh GPU now has 500 free that a whole GPU cannot use
    assert grown_b == pytest.approx(500 / 2)
    assert node_scores({"a": grown_a, "b": grown_b}) == {"a": MAX_SCORE, "b": 0}


def test_a_whole_gpu_claim_prefers_the_gpu_a_larger_claim_could_no_longer_use() -> None:
    mix = {Typical(Whole(2)): 1.0}
    # on "stranded" one GPU is left, which Whole(2) cannot use: taking it removes a fragment
    stranded = [Gpu(free=0, shares_left=0), Gpu(), Gpu(free=0, shares_left=0)]
    roomy = [Gpu(), Gpu(), Gpu()]  # two untouched GPUs remain after it: Whole(2) still fits
    pair = [Gpu(), Gpu()]  # the last pair is broken
    grown = {
        n: growth(g, Whole(1), mix) for n, g in (("stranded", stranded), ("roomy", roomy), ("pair", pair))
    }
    assert grown == {
        "stranded": pytest.approx(-1000.0),
        "roomy": pytest.approx(0.0),
        "pair": pytest.approx(1000.0),
    }
    assert node_scores(grown) == {"stranded": MAX_SCORE, "roomy": 5, "pair": 0}


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.none(), st.floats(-2000, 2000))))
def test_scores_rank_the_smallest_growth_highest_and_a_node_it_does_not_fit_lowest(
    grown: dict[str, float | None],
) -> None:
    scores = node_scores(grown)
    assert set(scores) == set(grown)
    assert all(0 <= s <= MAX_SCORE for s in scores.values())
    fitting = {n: g for n, g in grown.items() if g is not None}
    assert all(scores[n] == 0 for n, g in grown.items() if g is None)
    if fitting:
        best = min(fitting, key=lambda n: fitting[n])
        assert scores[best] == MAX_SCORE
        for n, low in fitting.items():
            for m, high in fitting.items():
                if low < high:
                    assert scores[n] >= scores[m]


@given(st.dictionaries(st.text(min_size=1, max_size=5), st.one_of(st.none(), st.floats(-5000, 5000))))
def test_with_a_unit_a_point_is_that_much_more_growth_than_the_least(grown: dict[str, float | None]) -> None:
    scores = node_scores(grown, unit=100)
    fitting = {n: g for n, g in grown.items() if g is not None}
    assert all(scores[n] == 0 for n, g in grown.items() if g is None)
    if fitting:
        low = min(fitting.values())
        for n, g in fitting.items():
            assert scores[n] == max(0, MAX_SCORE - round((g - low) / 100))


@given(
    st.dictionaries(
        st.text(min_size=1, max_size=5),
        st.tuples(st.one_of(st.none(), st.floats(-500, 500)), st.integers(0, 8000)),
    )
)
def test_fill_ranks_the_fullest_of_the_best_nodes_first(nodes: dict[str, tuple[float | None, int]]) -> None:
    grown = {n: g for n, (g, _) in nodes.items()}
    asked: list[str] = []

    def left(name: str) -> int:
        asked.append(name)
        return nodes[name][1]

    top = node_scores(grown, unit=40)
    filled = fill_scores(top, left)
    best = {n for n, s in top.items() if grown[n] is not None and s == MAX_SCORE}
    assert set(asked) == best  # the free capacity is asked of the best nodes only
    assert all(filled[n] == 0 for n in nodes if n not in best)
    if best:
        fullest = min(nodes[n][1] for n in best)
        assert {filled[n] for n in best if nodes[n][1] == fullest} == {MAX_SCORE}
        for a in best:
            for b in best:
                if nodes[a][1] < nodes[b][1]:
                    assert filled[a] >= filled[b] and (filled[a] > filled[b] or filled[b] == 0)


def test_fill_by_hand() -> None:
    # a and b tie for fragmentation (2 and 20: half a unit of 40 apart); c is a point worse; d does not fit
    grown: dict[str, float | None] = {"a": 2.0, "b": 20.0, "c": 60.0, "d": None}
    left = {"a": 900, "b": 150, "c": 0}
    assert fill_scores(node_scores(grown, unit=40), left.__getitem__) == {"a": 9, "b": 10, "c": 0, "d": 0}
    # free_after: a share of 300 on a GPU with 400 free and an untouched one; a pod without a GPU
    gpus = (Gpu(free=400, shares_left=3), Gpu())
    assert free_after(gpus, Share(300)) == 100 + MILLI
    assert free_after(gpus, None) == 400 + MILLI
    assert free_after(gpus, Whole(2)) is None


def test_nodes_nearly_alike_score_alike_with_a_unit_and_far_apart_without() -> None:
    grown: dict[str, float | None] = {"a": 0.0, "b": 30.0, "c": 5000.0}
    assert node_scores(grown, unit=100) == {"a": 10, "b": 10, "c": 0}
    assert node_scores({"a": 0.0, "b": 30.0}) == {"a": 10, "b": 0}  # min-max: 30 thousandths decide
    with pytest.raises(ConfigError, match="score unit"):
        node_scores(grown, unit=0)


def test_bad_values_are_refused_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="free capacity"):
        Gpu(free=1001)
    with pytest.raises(ConfigError, match=r"share is 1\.\.999"):
        Share(1000)
    with pytest.raises(ConfigError, match="at least one GPU"):
        Whole(0)
    with pytest.raises(ConfigError, match="CPU and memory cannot be negative"):
        Typical(Whole(1), cpu_milli=-1)
