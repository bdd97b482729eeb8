"""Each GPU node's pool is written once, through the node plugin's publisher; a busy API server is retried a
bounded number of times, and nodes without GPUs publish nothing."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

import pytest

from dra_driver.vocabulary.errors import PublishError
from e2e.benches.trace import publishers
from e2e.benches.trace.records import TraceNode
from kubelet_plugin.publish.publisher import PublishResult, SlicePublisher

NODES = [
    TraceNode(name="t4-a", cpu_milli=8000, memory_mib=32768, gpus=2, model="T4"),
    TraceNode(name="cpu-only", cpu_milli=8000, memory_mib=32768, gpus=0, model=""),
    TraceNode(name="g2-a", cpu_milli=96000, memory_mib=786432, gpus=8, model="G2"),
]


class Recorder:
    def __init__(self, failures: int) -> None:
        self.failures = failures
        self.calls: list[tuple[str, int]] = []

    def publish(self, slices: Sequence[dict[str, Any]]) -> PublishResult:
        node = slices[0]["spec"]["nodeName"]
        self.calls.append((node, len(slices)))
        if self.failures:
            self.failures -= 1
            raise PublishError(f"writing ResourceSlices of node {node}: 504 Gateway Timeout")
        return PublishResult(generation=1, created=len(slices))


def patch(monkeypatch: pytest.MonkeyPatch, recorder: Recorder) -> None:
    def publish(_: SlicePublisher, slices: Sequence[dict[str, Any]]) -> PublishResult:
        return recorder.publish(slices)

    monkeypatch.setattr(SlicePublisher, "publish", publish)


@pytest.fixture
def no_sleep(monkeypatch: pytest.MonkeyPatch) -> list[float]:
    slept: list[float] = []
    monkeypatch.setattr(time, "sleep", slept.append)
    return slept


def test_every_gpu_node_is_written_once_and_a_node_without_gpus_not_at_all(
    monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    recorder = Recorder(failures=0)
    patch(monkeypatch, recorder)
    written = publishers.publish_pools(api=None, nodes=NODES, settings=None, workers=1)  # type: ignore[arg-type]
    assert sorted(node for node, _ in recorder.calls) == ["g2-a", "t4-a"]
    assert written == sum(n for _, n in recorder.calls) > 0
    assert no_sleep == []


def test_a_busy_api_server_is_retried_then_its_error_stands(
    monkeypatch: pytest.MonkeyPatch, no_sleep: list[float]
) -> None:
    recorder = Recorder(failures=2)
    patch(monkeypatch, recorder)
    assert publishers.publish_pool(api=None, node=NODES[0], settings=None) > 0  # type: ignore[arg-type]
    assert len(recorder.calls) == 3 and no_sleep == [1.0, 2.0]

    recorder = Recorder(failures=publishers.PUBLISH_ATTEMPTS)
    patch(monkeypatch, recorder)
    with pytest.raises(PublishError, match="504 Gateway Timeout"):
        publishers.publish_pool(api=None, node=NODES[2], settings=None)  # type: ignore[arg-type]
    assert len(recorder.calls) == publishers.PUBLISH_ATTEMPTS
