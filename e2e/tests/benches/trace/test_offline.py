"""The offline replay: kube-scheduler's default scores and the extender's, counted by hand on small
clusters, and the protocol's invariants on random ones."""

from __future__ import annotations

import dataclasses

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from e2e.benches.trace.extender import SHIPPED as SHIPPED_CONFIGURATION
from e2e.benches.trace.levers import SHIPPED, shipped_mix
from e2e.benches.trace.levers import levers as named_levers
from e2e.benches.trace.offline import (
    FIRST_AVAILABLE_MAX,
    MAX_SCORE,
    Lever,
    Memo,
    ModelNode,
    default_score,
    extender_scores,
    first_available_scores,
    least_growth,
    model_order,
    packing_score,
    replay_offline,
    sigmoid_score,
    totals,
)
from e2e.benches.trace.records import TraceNode, TracePod
from e2e.benches.trace.replay import Arrival
from scheduler_extender.__main__ import UNIT
from scheduler_extender.fragmentation import Gpu, Share, Typical, Whole
from scheduler_extender.mix import MIB
from tests.support.smoke import covers, make_smoke

WHOLE_8_CPUS = {Typical(Whole(1), cpu_milli=8000, memory=MIB): 1.0}


def _arrivals(*pods: TracePod) -> list[Arrival]:
    return [Arrival(k, p.name, p) for k, p in enumerate(pods)]


def test_the_default_scores_by_hand() -> None:
    starved = ModelNode(TraceNode("starved", 6000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    roomy = ModelNode(TraceNode("roomy", 64000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    share = TracePod("s", 1000, 1024, 1, 500)
    # LeastAllocated: CPU (6000-1000)*100//6000 = 83, memory (65536-1024)*100//65536 = 98, mean 90;
    # Balanced: 1 - |1000/6000 - 1024/65536| / 2 = 0.9245 -> 92
    assert default_score(starved, share) == 90 + 92
    assert default_score(roomy, share) == 98 + 100
    # DynamicResources, weight 2: the share's claim lists G2 first, then T4 (the cluster's models, sorted)
    g2 = ModelNode(TraceNode("g2", 96000, 393216, 8, "G2"), gpus=(Gpu(),) * 8)
    # normalized to 0..100 first (an integer, as kube-scheduler's DefaultNormalizeScore), then weighted
    assert first_available_scores([g2, roomy], share, ["G2", "T4"]) == [200, 2 * (100 * 7 // 8)]
    assert first_available_scores([g2, roomy], share, ["G2", "T4"], weight=10) == [1000, 870]
    whole = TracePod("w", 1000, 1024, 1, 1000)
    assert first_available_scores([g2, roomy], whole, ["G2", "T4"]) == [0, 0]
    # a whole-GPU claim listing one alternative per model too (Lever.whole_order), T4 first here
    assert first_available_scores([g2, roomy], whole, ["G2", "T4"], ["T4", "G2"]) == [2 * (100 * 7 // 8), 200]
    assert first_available_scores([g2, roomy], share, ["G2", "T4"], ["T4", "G2"]) == [200, 2 * (100 * 7 // 8)]


def test_packing_and_the_model_order_by_hand() -> None:
    starved = ModelNode(TraceNode("starved", 6000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    roomy = ModelNode(TraceNode("roomy", 64000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    share = TracePod("s", 1000, 1024, 1, 500)
    # MostAllocated: CPU 1000*100//6000 = 16 (1000*100//64000 = 1), memory 1024*100//65536 = 1; the mean
    assert (packing_score(starved, share), packing_score(roomy, share)) == ((16 + 1) // 2, (1 + 1) // 2)
    # a pod that does not fit scores 0 for that resource, as kube-scheduler's does
    assert packing_score(starved, TracePod("big", 7000, 1024, 0, 0)) == 0
    # in place of the spreading: the fuller node wins
    packing = Lever("p", spread=False, pack=True)
    assert totals([starved, roomy], share, packing, WHOLE_8_CPUS, ["T4"]) == [8, 1]
    nodes = [
        TraceNode("a", 64000, 65536, 8, "G2"),
        TraceNode("b", 64000, 65536, 2, "T4"),
        TraceNode("c", 64000, 65536, 4, "V100M16"),
        TraceNode("d", 64000, 65536, 2, "V100M16"),
        TraceNode("e", 64000, 65536, 4, "V100M16"),
        TraceNode("cpu", 64000, 65536, 0, "T4"),
    ]
    assert model_order(nodes, "name") == ["G2", "T4", "V100M16"]
    # a model's typical node: the median of its nodes' GPU counts (V100M16: 2, 4, 4 -> 4)
    assert model_order(nodes, "few-gpus") == ["T4", "V100M16", "G2"]
    assert model_order(nodes, "many-gpus") == ["G2", "V100M16", "T4"]


def test_pods_without_a_gpu_take_their_own_unit() -> None:
    """A 60-CPU pod leaves `small` 4 CPUs, too few for the typical 8-CPU request: both its GPUs are stranded
    (growth 2,000 thousandths); `big` keeps room. At unit 1,000 that is two points; at a CPU unit of 4,000
    half a point, which rounds to none. A GPU pod keeps the unit."""
    small = ModelNode(TraceNode("small", 64000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    big = ModelNode(TraceNode("big", 128000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    cpu_pod = TracePod("c", 60000, 1024, 0, 0)
    lever = Lever("u", weight=1, mix=WHOLE_8_CPUS, unit=1000, cpu_pods=True)
    assert extender_scores([small, big], cpu_pod, lever, WHOLE_8_CPUS) == [80, 100]
    coarse = Lever("c", weight=1, mix=WHOLE_8_CPUS, unit=1000, cpu_pods=True, cpu_unit=4000)
    assert extender_scores([small, big], cpu_pod, coarse, WHOLE_8_CPUS) == [100, 100]
    gpu_pod = TracePod("g", 60000, 1024, 1, 1000)
    assert extender_scores([small, big], gpu_pod, coarse, WHOLE_8_CPUS) == extender_scores(
        [small, big], gpu_pod, lever, WHOLE_8_CPUS
    )


def test_the_fill_score_by_hand() -> None:
    """Three G2 nodes alike for fragmentation for a pod without a GPU (its CPU strands nothing on any):
    the fill score ranks the node left with the least free GPU capacity 10, the next 9; weighted 1 it adds
    10 points a rank, under DynamicResources' smallest step at weight 10. Whole-GPU pods get none."""
    mix = {Typical(Whole(1), cpu_milli=1000): 1.0}
    empty, half, full = (
        ModelNode(TraceNode(n, 96000, 393216, 2, "G2"), gpus=g)
        for n, g in (
            ("empty", (Gpu(), Gpu())),
            ("half", (Gpu(free=500, shares_left=9), Gpu())),
            ("full", (Gpu(free=0, shares_left=0), Gpu(free=100, shares_left=8))),
        )
    )
    lever = Lever(
        "f", weight=120, mix=mix, unit=40, cpu_pods=True, spread=False, fill_weight=1, dra_weight=10
    )
    cpu_pod = TracePod("c", 1000, 1024, 0, 0)
    # growth: none strands a GPU (1,000 millicores leave room); the free capacity left: 2000, 1500, 100
    assert extender_scores([empty, half, full], cpu_pod, lever, mix) == [12000 + 80, 12000 + 90, 12000 + 100]
    whole = TracePod("w", 1000, 1024, 1, 1000)
    unfilled = dataclasses.replace(lever, fill_weight=0)
    assert extender_scores([empty, half], whole, lever, mix) == extender_scores(
        [empty, half], whole, unfilled, mix
    )


def test_counting_cpu_the_extender_keeps_a_node_whole_for_a_two_gpu_pod() -> None:
    """starved has 2 GPUs and 6 CPUs, roomy 2 GPUs and 64 CPUs; typical requests are one whole GPU with 8
    CPUs. A half share comes first, then a pod of 2 whole GPUs and 8 CPUs, which only roomy can take, and
    only untouched. kube-scheduler alone puts the share on roomy (least allocated: 198 points against
    182), and the extender counting GPUs alone sees the two nodes alike (each share opens a GPU), so the
    second pod is dropped. Counting CPU, starved's GPUs are lost to a typical request already (growth
    -500, roomy's +500): the share goes there, and the second pod fits."""
    nodes = [TraceNode("roomy", 64000, 65536, 2, "T4"), TraceNode("starved", 6000, 65536, 2, "T4")]
    pods = _arrivals(TracePod("s", 1000, 1024, 1, 500), TracePod("w", 8000, 1024, 2, 1000))
    alone = replay_offline(nodes, pods, Lever("default"), seed=1)
    gpus_only = replay_offline(nodes, pods, Lever("g", weight=10, cpu_memory=False, mix=WHOLE_8_CPUS), seed=1)
    fgd = replay_offline(nodes, pods, Lever("f", weight=10, mix=WHOLE_8_CPUS, unit=100), seed=1)
    assert alone == gpus_only == [(500, True), (2000, False)]
    assert fgd == [(500, True), (2000, True)]


def test_without_spreading_the_extender_decides_and_fgd_policy_takes_the_least_growth() -> None:
    """The nodes of the test above, the share first: growth +500 on roomy, -500 on starved. The default
    profile scores roomy 198 and starved 182 (one model: DynamicResources scores nothing); with spreading
    off (`spread=False`, as deploy/scheduler/kube-scheduler-extender-config.yaml ships) only the extender's
    score counts: starved 10 x 25 x 10, roomy 0 (1000 thousandths of growth more, a point per 2); FGD's own
    policy is the growth itself, negated."""
    roomy = ModelNode(TraceNode("roomy", 64000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    starved = ModelNode(TraceNode("starved", 6000, 65536, 2, "T4"), gpus=(Gpu(), Gpu()))
    share = TracePod("s", 1000, 1024, 1, 500)
    both = [roomy, starved]
    assert totals(both, share, Lever("default"), WHOLE_8_CPUS, ["T4"]) == [198, 182]
    with_spread = Lever("s", weight=25, mix=WHOLE_8_CPUS, unit=2)
    assert totals(both, share, with_spread, WHOLE_8_CPUS, ["T4"]) == [198, 182 + 2500]
    nospread = Lever("n", weight=25, mix=WHOLE_8_CPUS, unit=2, spread=False)
    assert totals(both, share, nospread, WHOLE_8_CPUS, ["T4"]) == [0, 2500]
    policy = Lever("p", weight=1, mix=WHOLE_8_CPUS, fgd_policy=True)
    assert totals(both, share, policy, WHOLE_8_CPUS, ["T4"]) == [-500.0, 500.0]
    # a pod without a GPU: unscored by the extender unless cpu_pods, so with spreading off every node ties
    cpu_pod = TracePod("c", 1000, 1024, 0, 0)
    assert totals(both, cpu_pod, nospread, WHOLE_8_CPUS, ["T4"]) == [0, 0]


def test_inside_a_node_first_fit_best_fit_and_fgds_choice_by_hand() -> None:
    """One node of two GPUs. 600 thousandths go to GPU 0, 900 to GPU 1 (400 and 100 left); then 100: first
    fit in the published order takes GPU 0 (300 left), so the last pod, 400, fits nowhere; best fit takes the
    fuller GPU 1, and so does FGD's choice against a mix of 400-thousandth shares (GPU 0 keeps its 400
    usable and GPU 1's unusable 100 goes: growth -100, where on GPU 0 it would be +300), and the last pod
    fits."""
    nodes = [TraceNode("n", 64000, 65536, 2, "T4")]
    pods = _arrivals(*(TracePod(f"s{k}", 1000, 1024, 1, m) for k, m in enumerate((600, 900, 100, 400))))
    first = replay_offline(nodes, pods, Lever("first"), seed=1)
    best_fit = replay_offline(nodes, pods, Lever("best", inside="best-fit"), seed=1)
    mix = {Typical(Share(400)): 1.0}
    fgd = replay_offline(nodes, pods, Lever("fgd", weight=1, mix=mix, fgd_policy=True, inside="fgd"), seed=1)
    assert first == [(600, True), (900, True), (100, True), (400, False)]
    assert best_fit == fgd == [(600, True), (900, True), (100, True), (400, True)]
    node = ModelNode(nodes[0], gpus=(Gpu(free=400, shares_left=9), Gpu(free=100, shares_left=9)))
    memo = Memo(mix)
    assert least_growth(node, TracePod("p", 1000, 1024, 1, 100), mix, node.room(), memo) == (
        -100.0,
        (Gpu(free=0, shares_left=8), Gpu(free=400, shares_left=9)),
    )
    assert least_growth(node, TracePod("q", 1000, 1024, 1, 500), mix, node.room(), memo) is None


def test_fgds_own_score_by_hand() -> None:
    """FGD's simulator scores a node int(100 x sigmoid(fragmentation removed / 1000)); typical requests
    without a GPU (half the pods here) count a node's whole free capacity, so a pod's own GPUs come off
    the fragmentation at that share."""
    whole = TracePod("w", 1000, 1024, 1, 1000)
    alone = Lever("s", weight=1, mix=WHOLE_8_CPUS, fgd_policy=True, fgd_sigmoid=1.0)
    half = Lever("h", weight=1, mix=WHOLE_8_CPUS, fgd_policy=True, fgd_sigmoid=0.5)
    assert sigmoid_score(0.0, whole, alone) == 50  # 100 / (1 + e^0)
    assert sigmoid_score(-1000.0, whole, alone) == 73  # a GPU's worth removed: 100 / (1 + e^-1) = 73.1
    assert sigmoid_score(1000.0, whole, alone) == 26
    assert sigmoid_score(0.0, whole, half) == 62  # 500 removed: 100 / (1 + e^-0.5) = 62.2
    assert sigmoid_score(-10.0, whole, alone) == sigmoid_score(-30.0, whole, alone) == 50  # a tie


trace_pods = st.lists(
    st.builds(
        lambda k, cpu, gpu: TracePod(f"p{k}", cpu, 1024, gpu[0], gpu[1]),
        st.integers(0, 10_000),
        st.integers(0, 40_000),
        st.sampled_from([(0, 0), (1, 250), (1, 500), (1, 810), (1, 1000), (2, 1000), (4, 1000)]),
    ),
    max_size=25,
)
trace_nodes = st.lists(
    st.builds(
        lambda k, cpu, gpus: TraceNode(f"n{k}", cpu, 262144, gpus, "T4"),
        st.integers(0, 10_000),
        st.integers(4000, 64000),
        st.sampled_from([1, 2, 4]),
    ),
    min_size=1,
    max_size=4,
    unique_by=lambda n: n.name,
)
levers = st.sampled_from(
    [
        Lever("default"),
        Lever("g", weight=10, cpu_memory=False, mix=None),
        Lever("f", weight=5, mix={Typical(Share(500), cpu_milli=4000): 2.0, **WHOLE_8_CPUS}, unit=100),
        Lever("c", weight=2, mix=WHOLE_8_CPUS, unit=100, cpu_pods=True),
        Lever("n", weight=25, mix=WHOLE_8_CPUS, unit=2, cpu_pods=True, spread=False),
        Lever("p", weight=1, mix=WHOLE_8_CPUS, cpu_pods=True, fgd_policy=True),
        Lever("pi", weight=1, mix=WHOLE_8_CPUS, cpu_pods=True, fgd_policy=True, inside="fgd"),
        Lever("nb", weight=25, mix=WHOLE_8_CPUS, unit=2, cpu_pods=True, spread=False, inside="best-fit"),
    ]
)


@settings(max_examples=60, deadline=None)
@given(trace_nodes, trace_pods, levers)
def test_every_pod_is_tried_once_and_no_node_is_overfilled(
    nodes: list[TraceNode], pods: list[TracePod], lever: Lever
) -> None:
    arrivals = _arrivals(*pods)
    outcomes = replay_offline(nodes, arrivals, lever, seed=7)
    assert [r for r, _ in outcomes] == [p.request_milli for p in pods]
    placed = [p for p, (_, ok) in zip(pods, outcomes, strict=True) if ok]
    assert sum(p.request_milli for p in placed) <= sum(n.gpu_milli for n in nodes)
    assert sum(p.cpu_milli for p in placed) <= sum(n.cpu_milli for n in nodes)
    # a pod that fits no empty node is never placed
    for pod, (_, ok) in zip(pods, outcomes, strict=True):
        if pod.cpu_milli > max(n.cpu_milli for n in nodes) or pod.num_gpu > max(n.gpus for n in nodes):
            assert not ok
    assert replay_offline(nodes, arrivals, lever, seed=7) == outcomes  # the seed decides the ties


@covers("make bench-trace-offline SMOKE=1")
@pytest.mark.timeout(120)
def test_the_smoke_replay_gives_the_hand_count_for_every_lever() -> None:
    """The bench's slice (e2e/scenarios/own_plane/test_trace_bench.py counts it by hand): no GPU can
    hold two of its pods, so every lever places the same and reads 9.50 % at 100 % and 130 %."""
    done = make_smoke("bench-trace-offline", timeout=110)
    assert done.returncode == 0, done.stdout + done.stderr
    medians = [line for line in done.stdout.splitlines() if " median " in line]
    assert len(medians) >= 10, done.stdout
    assert all(line.endswith("median seeds=1 at100=9.50% at130=9.50%") for line in medians), done.stdout


def test_the_shipped_lever_is_the_shipped_configuration() -> None:
    """The lever the docs give as what ships is deploy/scheduler/kube-scheduler-extender-config.yaml with the
    extender's defaults, and its weights keep the three scores in order: a point of fragmentation above
    DynamicResources' range and the fill score's together, DynamicResources' smallest step (12 of 100,
    eight alternatives at most) above the fill score's range."""
    configuration = yaml.safe_load(SHIPPED_CONFIGURATION.read_text(encoding="utf-8"))
    lever = named_levers(shipped_mix())[SHIPPED]
    assert {e["prioritizeVerb"]: e["weight"] for e in configuration["extenders"]} == {
        "prioritize": lever.weight,
        "fill": lever.fill_weight,
    }
    (profile,) = configuration["profiles"]
    score = profile["plugins"]["score"]
    assert {p["name"] for p in score["disabled"]} == {"NodeResourcesFit", "NodeResourcesBalancedAllocation"}
    assert not lever.spread and not lever.pack
    assert {p["name"]: p["weight"] for p in score["enabled"]} == {"DynamicResources": lever.dra_weight}
    assert (lever.unit, lever.cpu_pods, lever.cpu_unit, lever.mix) == (UNIT, True, None, shipped_mix())
    point, dra_range, fill_range = 10 * lever.weight, 100 * lever.dra_weight, 10 * 10 * lever.fill_weight
    assert point > dra_range + fill_range
    assert (MAX_SCORE * 1 // FIRST_AVAILABLE_MAX) * lever.dra_weight > fill_range
