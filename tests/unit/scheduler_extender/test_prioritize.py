"""One prioritize call: the pod's claim looked up, every candidate node scored from what is held."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.fragmentation import Share, Typical, Whole
from scheduler_extender.node_room import keep_node, keep_pod
from scheduler_extender.prioritize import Scoring, Verb, node_names, prioritize
from tests.support.inventories import make_gpu, make_inventory

Obj = dict[str, Any]


def _slices(*nodes: str) -> list[Obj]:
    inventory = make_inventory(make_gpu(0, "L4"), make_gpu(1, "L4"))
    return [s for n in nodes for s in build_slices(inventory, NodeSettings(node_name=n))]


def _claim(name: str, request: Obj, *results: Obj) -> Obj:
    claim: Obj = {"metadata": {"namespace": "ns", "name": name}, "spec": {"devices": {"requests": [request]}}}
    if results:
        allocation = {
            "devices": {"results": [{"driver": "gpu.tessera.dev", "request": "gpu", **r} for r in results]}
        }
        claim["status"] = {"allocation": allocation}
    return claim


WHOLE = {"name": "gpu", "exactly": {"deviceClassName": "gpu.tessera.dev", "count": 1}}
HALF = {
    "name": "gpu",
    "exactly": {"deviceClassName": "vgpu.tessera.dev", "capacity": {"requests": {"cores": "50"}}},
}


def _pod(claim: str | None, *, cpu: str = "1", node: str | None = None, name: str = "p") -> Obj:
    spec: Obj = {"containers": [{"name": "c", "resources": {"requests": {"cpu": cpu, "memory": "1Gi"}}}]}
    if claim is not None:
        spec["resourceClaims"] = [{"name": "g", "resourceClaimName": claim}]
    if node is not None:
        spec["nodeName"] = node
    return {"metadata": {"namespace": "ns", "name": name}, "spec": spec, "status": {"phase": "Pending"}}


def _node(name: str, cpu: str) -> Obj:
    return {"metadata": {"name": name}, "status": {"allocatable": {"cpu": cpu, "memory": "64Gi"}}}


MIX = Scoring(mix={Typical(Whole(1), cpu_milli=4000): 1.0, Typical(Share(500), cpu_milli=4000): 1.0})


def test_a_share_goes_where_it_fills_a_gpu_up_not_where_it_breaks_a_whole_one() -> None:
    # a: GPU 0 half used by a share; b: untouched. Whole GPUs are in the mix, so opening a GPU on b costs.
    held = [
        _claim("s", HALF, {"pool": "a", "device": "gpu-0-vgpu", "consumedCapacity": {"cores": "50"}}),
        _claim("w", WHOLE, {"pool": "c", "device": "gpu-0"}),
    ]
    mine = _claim("mine", HALF)
    claims = {("ns", c["metadata"]["name"]): c for c in [*held, mine]}
    answer = prioritize(
        {"Pod": _pod("mine"), "NodeNames": ["a", "b", "unknown"]},
        slices=_slices("a", "b", "c"),
        claims=[*held, mine],
        lookup=lambda ns, n: claims.get((ns, n)),
        scoring=Scoring(mix=MIX.mix, unit=None),
    )
    assert answer == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}, {"Host": "unknown", "Score": 0}]


def test_with_the_nodes_cpu_counted_a_share_goes_where_the_gpus_are_stranded_anyway() -> None:
    """a and b alike in GPUs (both untouched); a has 3 CPUs left, so a typical request (4 CPUs) fits
    there no more and its GPUs count as lost already: the share goes to a, where it strands nothing more.
    Counting GPUs alone (no Nodes seen) the two are alike."""
    mine = _claim("mine", HALF)
    nodes = [keep_node(_node("a", "8")), keep_node(_node("b", "8"))]
    busy = keep_pod(_pod(None, cpu="5", node="a", name="busy"))
    assert busy is not None

    def ask(**seen: Any) -> list[dict[str, Any]]:
        return prioritize(
            {"Pod": _pod("mine"), "NodeNames": ["a", "b"]},
            slices=_slices("a", "b"),
            claims=[mine],
            lookup=lambda ns, n: mine if n == "mine" else None,
            scoring=MIX,
            **seen,
        )

    assert ask(nodes=nodes, pods=[busy]) == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}]
    assert ask() == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 10}]


def test_a_pod_without_a_gpu_is_scored_only_when_asked_and_goes_where_it_strands_no_gpu() -> None:
    nodes = [keep_node(_node("a", "8")), keep_node(_node("b", "8")), keep_node(_node("cpu-only", "8"))]
    pod = _pod(None, cpu="5")
    args = {"Pod": pod, "NodeNames": ["a", "b", "cpu-only"]}
    plain = prioritize(args, slices=_slices("a", "b"), claims=[], lookup=lambda ns, n: None, scoring=MIX)
    assert {s["Score"] for s in plain} == {0}
    scored = prioritize(
        args,
        slices=_slices("a", "b"),
        claims=[],
        lookup=lambda ns, n: None,
        scoring=Scoring(mix=MIX.mix, unit=100, cpu_pods=True),
        nodes=nodes,
    )
    # on a or b its 5 CPUs leave 3: every typical request loses the node's 2 free GPUs; on cpu-only nothing
    assert scored == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}, {"Host": "cpu-only", "Score": 10}]


def test_fill_breaks_the_tie_for_the_fuller_node_and_leaves_whole_gpus_to_chance() -> None:
    """b holds a share of 30 % on GPU 0, a holds nothing: for a pod without a GPU (whose CPU strands no GPU
    on either) the two are alike for fragmentation, and `fill` prefers b, left with less free GPU
    capacity. A pod of one whole GPU gets 0 everywhere from `fill`."""
    held = [_claim("s", HALF, {"pool": "b", "device": "gpu-0-vgpu", "consumedCapacity": {"cores": "30"}})]
    mine = _claim("mine", WHOLE)
    claims = {("ns", c["metadata"]["name"]): c for c in [*held, mine]}
    scoring = Scoring(mix=MIX.mix, unit=40, cpu_pods=True)

    def ask(pod: Obj, verb: Verb) -> list[dict[str, Any]]:
        return prioritize(
            {"Pod": pod, "NodeNames": ["a", "b"]},
            slices=_slices("a", "b"),
            claims=[*held, mine],
            lookup=lambda ns, n: claims.get((ns, n)),
            scoring=scoring,
            verb=verb,
        )

    assert ask(_pod(None), "prioritize") == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 10}]
    assert ask(_pod(None), "fill") == [{"Host": "a", "Score": 9}, {"Host": "b", "Score": 10}]
    whole = ask(_pod("mine"), "fill")
    assert whole == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


def test_a_pod_without_a_tessera_claim_gets_no_preference() -> None:
    answer = prioritize(
        {"Pod": {"spec": {}}, "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}},
        slices=_slices("a", "b"),
        claims=[],
        lookup=lambda ns, n: None,
        scoring=MIX,
    )
    assert answer == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


def test_a_body_without_nodes_is_refused_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="NodeNames"):
        node_names({"Pod": {}})
    with pytest.raises(ConfigError, match="NodeNames"):
        node_names({"NodeNames": [1, 2]})
