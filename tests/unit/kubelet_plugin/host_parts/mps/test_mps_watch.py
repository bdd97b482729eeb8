from __future__ import annotations

import contextlib
import threading
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.vocabulary.errors import MpsError
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.host_parts.mps.control import MpsDaemon, MpsDirs
from kubelet_plugin.host_parts.mps.watch import FAILED_REASON, RECOVERED_REASON, MpsWatch

G0, G1 = GpuUUID("GPU-0"), GpuUUID("GPU-1")


@dataclass
class Control:
    problems: dict[GpuUUID, str | None]
    fail: bool = False
    restarted: list[GpuUUID] = field(default_factory=list)

    def problem(self, *, gpu_uuid: GpuUUID) -> str | None:
        return self.problems.get(gpu_uuid)

    def restart(self, *, gpu_uuid: GpuUUID) -> MpsDaemon:
        if self.fail:
            raise MpsError("the tool is gone")
        self.restarted.append(gpu_uuid)
        self.problems[gpu_uuid] = None
        return MpsDaemon(gpu_uuid=gpu_uuid, pid=42, dirs=MpsDirs(Path("/x")), adopted=False)


def watch(control: Control, in_use: list[set[GpuUUID]], events: list[tuple[str, str]]) -> MpsWatch:
    lock = threading.RLock()
    return MpsWatch(
        control=control,  # type: ignore[arg-type]
        in_use=lambda: in_use[0],
        lock=lambda: lock,
        warn=lambda **kw: events.append((kw["reason"], kw["message"])),
    )


def test_only_a_wanting_daemon_of_a_gpu_in_use_is_replaced_with_an_event() -> None:
    control = Control({G0: None, G1: "its control daemon is not running"})
    events: list[tuple[str, str]] = []
    w = watch(control, [{G0, G1}], events)
    assert w.check_once() == [G1] and control.restarted == [G1]
    assert (
        events == [(RECOVERED_REASON, events[0][1])]
        and "not running" in events[0][1]
        and "pid 42" in events[0][1]
    )
    assert w.check_once() == [] and len(events) == 1


def test_a_gpu_whose_last_claim_left_is_left_to_settling() -> None:
    in_use: list[set[GpuUUID]] = [{G0}]
    control = Control({G0: "mute"})
    events: list[tuple[str, str]] = []

    class Leaving(Control):
        def problem(self, *, gpu_uuid: GpuUUID) -> str | None:
            in_use[0] = set()  # the unprepare of its last claim runs between the check and the lock
            return "mute"

    w = watch(Leaving(control.problems), in_use, events)
    assert w.check_once() == [] and events == []


def test_a_failed_replacement_is_reported_and_tried_again_next_round() -> None:
    control = Control({G0: "mute"}, fail=True)
    events: list[tuple[str, str]] = []
    w = watch(control, [{G0}], events)
    assert w.check_once() == [] and [r for r, _ in events] == [FAILED_REASON]
    control.fail = False
    assert w.check_once() == [G0] and [r for r, _ in events] == [FAILED_REASON, RECOVERED_REASON]


def test_an_event_that_cannot_be_posted_never_stops_the_watch() -> None:
    def broken(**_: Any) -> None:
        raise RuntimeError("API down")

    control = Control({G0: "mute"})
    w = MpsWatch(control=control, in_use=lambda: {G0}, lock=contextlib.nullcontext, warn=broken)  # type: ignore[arg-type]
    assert w.check_once() == [G0]


def test_a_daemon_the_other_instance_replaced_while_this_watch_waited_for_the_lock_is_left_running() -> None:
    """Issue #34: during a rolling update both instances' watches see the same dead daemon; the second to get
    the locks must not kill the new daemon the first one started (its clients just connected to it)."""
    control = Control({G0: "its control daemon is not running"})
    events: list[tuple[str, str]] = []

    @contextlib.contextmanager
    def other_instance_first() -> Any:
        control.problems[G0] = None  # the other instance's watch held the locks and replaced it
        yield

    w = MpsWatch(
        control=control,  # type: ignore[arg-type]
        in_use=lambda: {G0},
        lock=other_instance_first,
        warn=lambda **kw: events.append((kw["reason"], kw["message"])),
    )
    assert w.check_once() == [] and control.restarted == [] and events == []
