"""What a node has left of its CPU and memory: its allocatable less the requests of the pods bound to it."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from scheduler_extender.fragmentation import Room
from scheduler_extender.node_room import keep_node, keep_pod, requests_of, rooms

GIB = 1 << 30


def _pod(
    node: str | None, *containers: tuple[str, str], phase: str = "Pending", **spec: Any
) -> dict[str, Any]:
    body: dict[str, Any] = {
        "containers": [
            {"name": f"c{k}", "resources": {"requests": {"cpu": c, "memory": m}}}
            for k, (c, m) in enumerate(containers)
        ],
        **spec,
    }
    if node is not None:
        body["nodeName"] = node
    return {"metadata": {"namespace": "ns", "name": "p"}, "spec": body, "status": {"phase": phase}}


def test_a_pods_requests_are_its_containers_or_its_largest_init_container_plus_overhead() -> None:
    assert requests_of(_pod(None, ("500m", "1Gi"), ("1", "512Mi"))) == (1500, GIB + 512 * (1 << 20))
    init = [{"name": "i", "resources": {"requests": {"cpu": "4", "memory": "100Mi"}}}]
    assert requests_of(_pod(None, ("1", "1Gi"), initContainers=init)) == (4000, GIB)
    assert requests_of(_pod(None, ("1", "1Gi"), overhead={"cpu": "250m", "memory": "1Gi"})) == (1250, 2 * GIB)
    # untrusted: unreadable quantities count as nothing, nothing raises
    assert requests_of({"spec": {"containers": [{"resources": {"requests": {"cpu": "lots"}}}, 7]}}) == (0, 0)
    assert requests_of({"spec": "garbage"}) == (0, 0)


def test_only_bound_pods_that_have_not_finished_are_kept() -> None:
    assert keep_pod(_pod(None, ("1", "1Gi"))) is None
    assert keep_pod(_pod("a", ("1", "1Gi"), phase="Succeeded")) is None
    assert keep_pod(_pod("a", ("1", "1Gi"), phase="Failed")) is None
    assert keep_pod(_pod("a", ("1", "1Gi"))) == {
        "metadata": {"namespace": "ns", "name": "p"},
        "node": "a",
        "cpu": 1000,
        "memory": GIB,
    }


@given(
    st.lists(
        st.tuples(st.sampled_from(["a", "b", "gone"]), st.integers(0, 8000), st.integers(0, 64)), max_size=20
    )
)
def test_a_nodes_room_is_its_allocatable_less_what_its_pods_request(pods: list[tuple[str, int, int]]) -> None:
    nodes = [
        keep_node({"metadata": {"name": n}, "status": {"allocatable": {"cpu": "16", "memory": "64Gi"}}})
        for n in ("a", "b")
    ]
    kept = [keep_pod(_pod(n, (f"{c}m", f"{m}Gi"))) for n, c, m in pods]
    found = rooms(nodes, [p for p in kept if p is not None])
    for name in ("a", "b"):
        mine = [(c, m) for n, c, m in pods if n == name]
        assert found[name] == Room(
            cpu_milli=16_000 - sum(c for c, _ in mine), memory=(64 - sum(m for _, m in mine)) * GIB
        )
    assert "gone" not in found  # a pod on a node not seen is passed over
