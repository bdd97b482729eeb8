"""The cluster as the score reads it: GPUs from the slices Tessera's own builder makes, use from claims."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from scheduler_extender.cluster_view import (
    NodeGpus,
    demand_of,
    held,
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


def _node(memory: int, product: str = "") -> NodeGpus:
    return NodeGpus(order=["u"], memory={"u": memory}, product=product)


def test_a_pods_request_is_read_from_its_claim() -> None:
    whole = _claim(
        {"exactly": {"deviceClassName": "gpu.tessera.dev", "allocationMode": "ExactCount", "count": 4}}
    )
    assert demand_of([whole], node=_node(16 * GIB)) == Whole(4)
    share = {
        "deviceClassName": "vgpu.tessera.dev",
        "capacity": {"requests": {"memory": "4Gi", "cores": "20"}},
    }
    assert demand_of([_claim({"exactly": share})], node=_node(16 * GIB)) == Share(250)
    # firstAvailable naming no model: its first alternative
    other = {**share, "capacity": {"requests": {"memory": "1Gi"}}}
    assert demand_of(
        [_claim({"firstAvailable": [{"name": "x", **share}, other]})], node=_node(16 * GIB)
    ) == Share(250)
    # not Tessera's, all of a node's, or unreadable: no preference
    assert demand_of([_claim({"exactly": {"deviceClassName": "nic.example.com"}})], node=_node(GIB)) is None
    every = {"deviceClassName": "gpu.tessera.dev", "allocationMode": "All"}
    assert demand_of([_claim({"exactly": every})], node=_node(GIB)) is None
    assert demand_of([{"spec": "garbage"}], node=_node(GIB)) is None


def _on(product: str, memory: str) -> dict[str, Any]:
    expression = f'device.attributes["gpu.tessera.dev"].productName == "{product}"'
    return {
        "name": product.rsplit(maxsplit=1)[-1].lower(),
        "deviceClassName": "vgpu.tessera.dev",
        "selectors": [{"cel": {"expression": expression}}],
        "capacity": {"requests": {"memory": memory}},
    }


def test_with_one_alternative_per_model_the_nodes_own_is_weighed() -> None:
    """The trace bench's shape (and tessera convert's for HAMi's gpumem-percentage): half of a 32 GiB GPU
    first, then half of a 16 GiB one. On a 16 GiB node the first would read as a whole GPU."""
    claim = _claim({"firstAvailable": [_on("Big 32GB", "16Gi"), _on("Tesla T4", "8Gi")]})
    assert demand_of([claim], node=_node(16 * GIB, "Tesla T4")) == Share(500)
    assert demand_of([claim], node=_node(32 * GIB, "Big 32GB")) == Share(500)
    # a node whose model no alternative names: the first, as before
    assert demand_of([claim], node=_node(32 * GIB, "Other")) == Share(500)
    # a selector naming the start of the product name serves it
    starts = "device.attributes[\"gpu.tessera.dev\"].productName.startsWith('Tesla')"
    prefix = {**_on("Tesla", "8Gi"), "selectors": [{"cel": {"expression": starts}}]}
    assert demand_of(
        [_claim({"firstAvailable": [_on("Big 32GB", "16Gi"), prefix]})], node=_node(16 * GIB, "Tesla T4")
    ) == Share(500)


def test_a_nodes_product_name_is_read_from_its_slices() -> None:
    nodes = read_slices(_slices("a", 2))
    assert nodes["a"].product.startswith("NVIDIA L4")
