"""The replay protocol's arithmetic: the arrival order (sorted, shuffled by seed, padded to 130 %), the curve
of unallocated GPUs against arrivals, the median over seeds, and the proportional sample."""

from __future__ import annotations

from collections import Counter

import pytest
from hypothesis import given
from hypothesis import strategies as st

from e2e.benches.trace.records import TraceError, TraceNode, TracePod
from e2e.benches.trace.replay import Point, arrival_order, at, curve, median_at, sample_cluster


def pod(name: str, milli: int) -> TracePod:
    if milli == 0:
        return TracePod(name, 1000, 1024, 0, 0)
    if milli < 1000:
        return TracePod(name, 1000, 1024, 1, milli)
    return TracePod(name, 1000, 1024, milli // 1000, 1000)


asks = st.sampled_from([0, 50, 230, 460, 810, 1000, 2000, 8000])
trace = st.lists(asks, min_size=1, max_size=40).map(
    lambda ms: [pod(f"p{k:03d}", m) for k, m in enumerate(ms)]
)


@given(trace, st.integers(0, 2**32), st.integers(1, 40_000))
def test_the_trace_comes_shuffled_then_padded_until_130_percent(
    pods: list[TracePod], seed: int, cluster: int
) -> None:
    if not any(p.request_milli for p in pods):
        with pytest.raises(TraceError, match="no pod of the trace asks for a GPU"):
            arrival_order(pods, seed=seed, cluster_milli=cluster)
        return
    order = arrival_order(pods, seed=seed, cluster_milli=cluster)
    head, pads = order[: len(pods)], order[len(pods) :]
    assert sorted(a.name for a in head) == sorted(p.name for p in pods)  # every pod once, in some order
    assert [a.index for a in order] == list(range(len(order)))
    assert len({a.name for a in order}) == len(order)  # padded copies have names of their own
    assert all(a.name.startswith(f"{a.pod.name}-r") for a in pads)
    total = sum(a.pod.request_milli for a in order)
    if pads:  # padded just far enough: the last pad crossed 130 %
        assert 100 * total >= 130 * cluster > 100 * (total - pads[-1].pod.request_milli)
    else:
        assert 100 * sum(p.request_milli for p in pods) >= 130 * cluster
    # the order is the seed's alone: the same for the trace listed in any order, another for another seed
    assert order == arrival_order(list(reversed(pods)), seed=seed, cluster_milli=cluster)


def test_seeds_give_different_orders() -> None:
    pods = [pod(f"p{k:02d}", 460) for k in range(30)]
    orders = {tuple(a.name for a in arrival_order(pods, seed=s, cluster_milli=10_000)) for s in range(42, 45)}
    assert len(orders) == 3


def test_the_curve_by_hand() -> None:
    """Cluster of 2 GPUs (2000 milli): 1000 placed (50 % arrived), a CPU pod dropped, 810 placed (90.5 %),
    650 dropped (123 %), 650 dropped (155.5 %)."""
    outcomes = [(1000, True), (0, False), (810, True), (650, False), (650, False)]
    points = curve(outcomes, cluster_milli=2000)
    assert [p.mark for p in points] == list(range(10, 131, 10))
    assert at(points, 50) == Point(mark=50, tried=1, placed=1, arrived_pct=50.0, unallocated_pct=50.0)
    assert at(points, 60) == Point(mark=60, tried=3, placed=2, arrived_pct=90.5, unallocated_pct=9.5)
    assert at(points, 100) == Point(mark=100, tried=4, placed=2, arrived_pct=123.0, unallocated_pct=9.5)
    assert at(points, 130) == Point(mark=130, tried=5, placed=2, arrived_pct=155.5, unallocated_pct=9.5)
    assert at(curve(outcomes[:3], cluster_milli=2000), 100) is None  # 90.5 % never reaches 100 %


@given(st.lists(st.tuples(asks, st.booleans()), max_size=60), st.integers(1, 20_000))
def test_each_point_is_the_first_pod_past_its_mark(outcomes: list[tuple[int, bool]], cluster: int) -> None:
    points = curve(outcomes, cluster_milli=cluster)
    for p in points:
        before = sum(m for m, _ in outcomes[: p.tried - 1])
        assert 100 * (before + outcomes[p.tried - 1][0]) >= p.mark * cluster > 100 * before
        allocated = sum(m for m, ok in outcomes[: p.tried] if ok)
        assert p.unallocated_pct == pytest.approx(100 - 100 * allocated / cluster)
    assert [p.unallocated_pct for p in points] == sorted((p.unallocated_pct for p in points), reverse=True)


def test_the_median_needs_every_seed_to_reach_the_mark() -> None:
    def run(value: float) -> list[Point]:
        return [Point(100, 1, 1, 100.0, value)]

    assert median_at([run(9.0), run(5.0), run(7.0)], 100) == 7.0
    assert median_at([run(9.0), []], 100) is None
    with pytest.raises(TraceError, match="no GPUs"):
        curve([(0, True)], cluster_milli=0)


def _cluster() -> list[TraceNode]:
    shapes = (
        [("G2", 8)] * 549 + [("T4", 2)] * 387 + [("P100", 2)] * 131 + [("V100M16", 1)] * 19 + [("A10", 1)] * 2
    )
    return [TraceNode(f"n{k:04d}", 96000, 393216, g, m) for k, (m, g) in enumerate(shapes)]


def test_a_sample_keeps_the_mix_of_node_shapes() -> None:
    nodes = _cluster()
    pods = [pod(f"p{k:04d}", 460) for k in range(1000)]
    picked, chosen = sample_cluster(nodes, pods, fraction=0.1, seed=3)
    assert len(picked) == round(0.1 * len(nodes)) and len(chosen) == 100
    shapes = Counter((n.model, n.gpus) for n in picked)
    assert shapes == {("G2", 8): 55, ("T4", 2): 39, ("P100", 2): 13, ("V100M16", 1): 2}
    assert len({n.name for n in picked}) == len(picked) and set(picked) <= set(nodes)
    assert (picked, chosen) == sample_cluster(list(reversed(nodes)), pods, fraction=0.1, seed=3)
    assert sample_cluster(nodes, pods, fraction=0.1, seed=4)[0] != picked
    assert sample_cluster(nodes, pods, fraction=1.0)[0] == sorted(nodes, key=lambda n: n.name)
    with pytest.raises(TraceError, match="give 0 < fraction <= 1"):
        sample_cluster(nodes, pods, fraction=0)
