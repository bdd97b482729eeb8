"""The publisher against the real API server (resource.k8s.io/v1, the release's default gates)."""

from __future__ import annotations

import threading
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.io.rest_calls import RestCalls
from kubelet_plugin.node.events import NodeEvents
from kubelet_plugin.publish.publisher import SlicePublisher, with_probe_taint

pytestmark = pytest.mark.e2e
NODES = Path(__file__).resolve().parents[3] / "e2e" / "nodes"


class CountingApi(k8s.ResourceV1Api):
    """The real API object, counting writes; `before_replace` lets a test play a second writer."""

    def __init__(self, api_client: k8s.ApiClient) -> None:
        super().__init__(api_client)
        self.writes = 0
        self.before_replace: list[Any] = []

    def create_resource_slice(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        return super().create_resource_slice(*args, **kwargs)

    def replace_resource_slice(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        if self.before_replace:
            self.before_replace.pop(0)(kwargs["name"])
        return super().replace_resource_slice(*args, **kwargs)

    def delete_resource_slice(self, *args: Any, **kwargs: Any) -> Any:
        self.writes += 1
        return super().delete_resource_slice(*args, **kwargs)


def slices_for(node: str, file: str) -> list[dict[str, Any]]:
    inv = SimulatedBackend.from_file(node_file=NODES / file, state_file=None).inventory()
    return build_slices(inv, NodeSettings(node_name=node))


def name_of(s: k8s.V1ResourceSlice) -> str:
    return str(s.metadata.name if s.metadata else "")


def pool(api: k8s.ResourceV1Api, node: str) -> list[k8s.V1ResourceSlice]:
    listed = api.list_resource_slice(field_selector=f"spec.nodeName={node},spec.driver=gpu.tessera.dev")
    return sorted(listed.items or [], key=name_of)


@pytest.fixture
def node() -> str:
    return f"pub-{uuid.uuid4().hex[:8]}"


def test_publish_repeat_change_and_extra_slice(k8s_api: k8s.ApiClient, node: str) -> None:
    api = CountingApi(k8s_api)
    pub = SlicePublisher(api=api, node_name=node, events=NodeEvents(rest=RestCalls(k8s_api), node_name=node))

    first = pub.publish(slices_for(node, "h100x8.yaml"))
    assert (first.created, first.generation, first.degraded) == (5, 1, False), first.dropped
    stored = pool(api, node)
    assert len(stored) == 5
    assert {(s.spec.pool.generation, s.spec.pool.resource_slice_count) for s in stored} == {(1, 5)}
    assert sum(len(s.spec.devices or []) for s in stored) == 224  # 28 per H100: whole, vgpu, mps, 25 MIG
    vgpu = next(d for s in stored for d in s.spec.devices or [] if d.name == "gpu-0-vgpu")
    assert vgpu.allow_multiple_allocations is True and vgpu.consumes_counters

    before = api.writes
    again = pub.publish(slices_for(node, "h100x8.yaml"))
    assert again.writes == 0 and api.writes == before and again.generation == 1

    smaller = pub.publish(slices_for(node, "mixed-a100-l4.yaml"))
    assert (smaller.updated, smaller.deleted, smaller.generation) == (2, 3, 2)
    assert [s.spec.pool.resource_slice_count for s in pool(api, node)] == [2, 2]

    extra = slices_for(node, "mixed-a100-l4.yaml")[1]
    extra["metadata"]["name"] = f"{node}-stray"
    api.create_resource_slice(body=k8s.V1ResourceSlice.from_dict(extra))
    cleaned = pub.publish(slices_for(node, "mixed-a100-l4.yaml"))
    assert cleaned.deleted == 1 and cleaned.generation == 3
    assert [name_of(s) for s in pool(api, node)] == [
        f"{node}-gpu.tessera.dev-0",
        f"{node}-gpu.tessera.dev-1",
    ]


def test_conflicting_writer_is_survived(k8s_api: k8s.ApiClient, node: str) -> None:
    api = CountingApi(k8s_api)
    plain = k8s.ResourceV1Api(k8s_api)
    pub = SlicePublisher(api=api, node_name=node)
    pub.publish(slices_for(node, "h100x8.yaml"))

    def other_writer(name: str) -> None:
        # A change the API server cannot treat as a no-op, so the slice's resourceVersion moves on.
        obj = plain.read_resource_slice(name)
        assert obj.metadata is not None
        obj.metadata.labels = {**(obj.metadata.labels or {}), "touched-by": "another-writer"}
        plain.replace_resource_slice(name, obj)

    api.before_replace.append(other_writer)
    result = pub.publish(slices_for(node, "mixed-a100-l4.yaml"))
    assert result.conflicts == 1
    final = pool(api, node)
    assert len(final) == 2 and {s.spec.pool.generation for s in final} == {result.generation}
    assert sum(len(s.spec.devices or []) for s in final) == 12  # 4 GPUs: whole, vgpu, mps each


def test_run_repairs_foreign_changes(k8s_api: k8s.ApiClient, node: str) -> None:
    plain = k8s.ResourceV1Api(k8s_api)
    pub = SlicePublisher(api=plain, node_name=node)
    stop = threading.Event()
    want = slices_for(node, "h100x8.yaml")
    loop = threading.Thread(
        target=pub.run, kwargs={"desired": lambda _degraded: want, "stop": stop, "watch_s": 2}
    )
    loop.start()
    try:
        deadline = time.monotonic() + 30
        while len(pool(plain, node)) != 5:
            assert time.monotonic() < deadline, "run() did not publish"
            time.sleep(0.2)
        plain.delete_resource_slice(f"{node}-gpu.tessera.dev-3")
        # the repair is one write per slice: until the last, the pool may hold 5 slices of two generations
        deadline = time.monotonic() + 30
        while (seen := [s.spec.pool.generation for s in pool(plain, node)]) != [2] * 5:
            assert time.monotonic() < deadline, f"run() did not repair a deleted slice: generations {seen}"
            time.sleep(0.2)
    finally:
        stop.set()
        loop.join(timeout=30)
    assert not loop.is_alive()


def test_a_probe_finds_everything_kept_and_stores_nothing(k8s_api: k8s.ApiClient, node: str) -> None:
    api = CountingApi(k8s_api)
    pub = SlicePublisher(api=api, node_name=node)
    full = slices_for(node, "h100x8.yaml")
    tainted = with_probe_taint(full)
    assert tainted[1]["spec"]["devices"][0]["taints"][0]["value"] == "probe" and "taints" not in str(full)
    assert pub.probe(tainted) == ()
    assert api.writes == len(full)  # one dry-run create each
    assert pool(api, node) == []
