"""The daemon's view of an administrator's GPU cordons, read from the Node: what changed, the Events that say
so, a bad annotation that keeps the last good cordons, and a time for entries written without one."""

from __future__ import annotations

from typing import Any

from dra_driver.core.cordon import GpuCordon
from dra_driver.core.gpu_health import Effect
from dra_driver.vocabulary.names import CORDON_ANNOTATION
from kubelet_plugin.node.gpu_cordons import CORDON_INVALID_REASON, CORDON_REASON, GpuCordons
from kubelet_plugin.node.node_reader import NodeReader


class FakeEvents:
    def __init__(self) -> None:
        self.posted: list[tuple[str, str, str]] = []

    def warn(self, *, reason: str, message: str) -> bool:
        self.posted.append(("Warning", reason, message))
        return True

    def normal(self, *, reason: str, message: str) -> bool:
        self.posted.append(("Normal", reason, message))
        return True


def node(annotation: str | None) -> Any:
    annotations = None if annotation is None else {CORDON_ANNOTATION: annotation, "other": "x"}
    return {"metadata": {"annotations": annotations}}


def make(events: FakeEvents, now: list[float]) -> GpuCordons:
    return GpuCordons(node_name="n1", events=events, clock=lambda: now[0])  # type: ignore[arg-type]


def test_a_cordon_then_a_drain_then_an_uncordon_are_each_one_change_and_one_event() -> None:
    events, now = FakeEvents(), [1000.0]
    cordons = make(events, now)
    assert not cordons.observe(node(None)) and cordons.current() == {}
    assert cordons.observe(node("gpu-3=NoSchedule@2026-11-28T12:00:00Z"))
    assert cordons.current() == {3: GpuCordon(3, Effect.NO_SCHEDULE, 1795867200)}
    assert not cordons.observe(node("gpu-3=NoSchedule@2026-11-28T12:00:00Z"))  # the same: nothing to do
    assert cordons.observe(node("gpu-3=NoExecute@2026-11-28T12:05:00Z"))
    assert cordons.observe(node(""))
    assert cordons.current() == {}
    assert [(k, r) for k, r, _ in events.posted] == [("Normal", CORDON_REASON)] * 3
    assert [m.split("gpu-3 ")[1].split(" by")[0] for _, _, m in events.posted] == [
        "cordoned (no new claims)",
        "drained (its pods are evicted)",
        "uncordoned",
    ]


def test_an_entry_without_a_time_keeps_the_time_first_seen_so_its_taint_does_not_change() -> None:
    events, now = FakeEvents(), [1000.0]
    cordons = make(events, now)
    assert cordons.observe(node("gpu-1=NoSchedule"))
    now[0] = 2000.0
    assert not cordons.observe(node("gpu-1=NoSchedule"))
    assert cordons.current() == {1: GpuCordon(1, Effect.NO_SCHEDULE, 1000)}
    assert cordons.observe(node("gpu-1=NoExecute"))  # a new effect is a new cordon, with a new time
    assert cordons.current()[1].since == 2000
    assert cordons.observe(node(""))
    assert cordons.observe(node("gpu-1=NoExecute"))  # lifted and set again: the time it was set again
    assert cordons.current()[1].since == 2000


def test_a_bad_annotation_keeps_the_last_good_cordons_and_says_so_once() -> None:
    events, now = FakeEvents(), [1000.0]
    cordons = make(events, now)
    assert cordons.observe(node("gpu-2=NoExecute@2026-11-28T12:00:00Z"))
    for _ in range(3):
        assert not cordons.observe(node("gpu-2=NoExecute,gpu-2=NoSchedule"))
    assert cordons.current() == {2: GpuCordon(2, Effect.NO_EXECUTE, 1795867200)}
    warnings = [m for k, r, m in events.posted if k == "Warning"]
    assert len(warnings) == 1 and CORDON_INVALID_REASON in [r for _, r, _ in events.posted]
    assert (
        "gpu-2 is named twice" in warnings[0]
        and "keeps its last good cordons: gpu-2=NoExecute" in warnings[0]
    )
    assert not cordons.observe(node("gpu-2=NoExecute@2026-11-28T12:00:00Z"))  # fixed: the same as kept
    assert not cordons.observe(node("junk"))  # a new bad value is reported again
    assert len([k for k, _, _ in events.posted if k == "Warning"]) == 2


def test_an_unreadable_node_changes_nothing() -> None:
    cordons = make(FakeEvents(), [1.0])
    cordons.observe(node("gpu-0=NoSchedule"))
    assert not cordons.observe(None)
    assert list(cordons.current()) == [0]


def test_the_reader_hands_every_observer_every_read_of_the_node() -> None:
    seen: list[tuple[str, Any]] = []
    reads = iter([node("a"), node("b")])

    class Rest:
        def get(self, path: str) -> Any:
            assert path == "/api/v1/nodes/n1"
            return next(reads)

    def first(n: Any) -> bool:
        seen.append(("first", n))
        return True

    def second(n: Any) -> bool:
        seen.append(("second", n))
        return False

    reader = NodeReader(
        rest=Rest(),  # type: ignore[arg-type]
        node_name="n1",
        observers=(first, second),
        on_change=lambda: None,
    )
    assert reader.check()
    assert [who for who, _ in seen] == ["first", "second"]  # the second sees it although the first changed
    assert seen[0][1] is seen[1][1]
