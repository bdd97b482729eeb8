"""One prioritize call: the pod's claim looked up, every candidate node scored from what is held."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.prioritize import node_names, prioritize
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


def _pod(claim: str) -> Obj:
    return {
        "metadata": {"namespace": "ns", "name": "p"},
        "spec": {"resourceClaims": [{"name": "g", "resourceClaimName": claim}]},
    }


def test_a_share_goes_where_it_fills_a_gpu_up_not_where_it_breaks_a_whole_one() -> None:
    # a: GPU 0 half used by a share; b: untouched. Whole GPUs are asked for too, so opening a GPU on b costs.
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
    )
    assert answer == [{"Host": "a", "Score": 10}, {"Host": "b", "Score": 0}, {"Host": "unknown", "Score": 0}]


def test_a_pod_without_a_tessera_claim_gets_no_preference() -> None:
    answer = prioritize(
        {"Pod": {"spec": {}}, "Nodes": {"items": [{"metadata": {"name": "a"}}, {"metadata": {"name": "b"}}]}},
        slices=_slices("a", "b"),
        claims=[],
        lookup=lambda ns, n: None,
    )
    assert answer == [{"Host": "a", "Score": 0}, {"Host": "b", "Score": 0}]


def test_a_body_without_nodes_is_refused_with_the_field_named() -> None:
    with pytest.raises(ConfigError, match="NodeNames"):
        node_names({"Pod": {}})
    with pytest.raises(ConfigError, match="NodeNames"):
        node_names({"NodeNames": [1, 2]})
