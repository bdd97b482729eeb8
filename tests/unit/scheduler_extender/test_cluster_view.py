"""The cluster as the score reads it: GPUs from the slices Tessera's own builder makes, use from claims."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from scheduler_extender.cluster_view import (
    demand_of,
    held,
    mix_of,
    node_gpus,
    read_slices,
    share_milli,
)
from scheduler_extender.fragmentation import MILLI, Gpu, Share, Whole
from tests.support.inventories import make_gpu, make_inventory

GIB = 1 << 30


def _slices(node: str, gpus: int = 2) -> list[dict[str, Any]]:
    return build_slices(
        make_inventory(*(make_gpu(i, "L4") for i in range(gpus))), NodeSettings(node_name=node)
    )


def _allocated(*results: dict[str, Any]) -> dict[str, Any]:
    return {
        "metadata": {"namespace": "ns", "name": "held"},
        "status": {
            "allocation": {"devices": {"results": [{"driver": "gpu.tessera.dev", **r} for r in results]}}
        },
    }


def test_a_nodes_gpus_are_read_from_its_published_slices_in_index_order() -> None:
    nodes = read_slices([*_slices("a", 3), *_slices("b", 1)])
    assert sorted(nodes) == ["a", "b"]
    a = nodes["a"]
    assert len(a.order) == 3
    assert [a.devices[f"gpu-{i}"].uuid for i in range(3)] == a.order
    assert all(a.devices[f"gpu-{i}-vgpu"].uuid == a.order[i] for i in range(3))
    assert a.shares == dict.fromkeys(a.order, 10)  # the default sharesPerGpu
    assert node_gpus(a, ()) == (Gpu(), Gpu(), Gpu())


def test_whole_gpus_and_shares_held_take_their_part_of_their_gpu() -> None:
    nodes = read_slices(_slices("a", 2))
    memory = nodes["a"].gpu_memory()
    claim = _allocated(
        {"pool": "a", "device": "gpu-1"},
        {
            "pool": "a",
            "device": "gpu-0-vgpu",
            "consumedCapacity": {"memory": str(memory // 4), "cores": "10"},
        },
    )
    holdings = held(claim, nodes)
    assert node_gpus(nodes["a"], holdings) == (Gpu(free=750, shares_left=9), Gpu(free=0, shares_left=10))
    # another driver's device, another node's pool, an unknown device: not ours, nothing held
    assert held(_allocated({"pool": "z", "device": "gpu-0"}, {"pool": "a", "device": "nic-0"}), nodes) == []
    assert held({"status": {"allocation": "garbage"}}, nodes) == []
    assert mix_of([holdings, holdings]) == {Whole(1): 2.0, Share(250): 2.0}


@given(st.integers(0, 100), st.integers(0, 100 * GIB), st.integers(1, 100 * GIB))
def test_a_share_is_the_larger_of_its_sm_percent_and_its_memory_part(
    cores: int, memory: int, total: int
) -> None:
    milli = share_milli(cores=cores, memory=memory, gpu_memory=total)
    assert 0 <= milli <= MILLI
    assert milli >= min(MILLI, cores * 10)
    assert milli * total >= min(MILLI * total, memory * MILLI)  # never less than the memory's part


def _claim(request: dict[str, Any]) -> dict[str, Any]:
    return {"spec": {"devices": {"requests": [{"name": "gpu", **request}]}}}


def test_a_pods_request_is_read_from_its_claim() -> None:
    whole = _claim(
        {"exactly": {"deviceClassName": "gpu.tessera.dev", "allocationMode": "ExactCount", "count": 4}}
    )
    assert demand_of([whole], gpu_memory=16 * GIB) == Whole(4)
    share = {
        "deviceClassName": "vgpu.tessera.dev",
        "capacity": {"requests": {"memory": "4Gi", "cores": "20"}},
    }
    assert demand_of([_claim({"exactly": share})], gpu_memory=16 * GIB) == Share(250)
    # firstAvailable: its first alternative
    other = {**share, "capacity": {"requests": {"memory": "1Gi"}}}
    assert demand_of(
        [_claim({"firstAvailable": [{"name": "x", **share}, other]})], gpu_memory=16 * GIB
    ) == Share(250)
    # not Tessera's, all of a node's, or unreadable: no preference
    assert demand_of([_claim({"exactly": {"deviceClassName": "nic.example.com"}})], gpu_memory=GIB) is None
    every = {"deviceClassName": "gpu.tessera.dev", "allocationMode": "All"}
    assert demand_of([_claim({"exactly": every})], gpu_memory=GIB) is None
    assert demand_of([{"spec": "garbage"}], gpu_memory=GIB) is None
