"""The vgpu loops' pace: a round every POLL while there is work, else asleep until woken (or the fallback)."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator

import pytest

from kubelet_plugin.host_parts.vgpu import pacing

POLL_S = 0.010


class Rounds:
    """A loop's rounds, run by `pace` in a thread: each says whether there is work (`busy`)."""

    def __init__(self, *, wake: threading.Event | None) -> None:
        self.busy = False
        self.times: list[float] = []
        self.failing = False
        self.stop = threading.Event()
        self.wake = wake
        self.thread = threading.Thread(
            target=pacing.pace,
            args=(self.stop, self.one_round),
            kwargs={"poll_s": POLL_S, "wake": wake, "what": "test loop"},
            daemon=True,
        )

    def one_round(self) -> bool:
        self.times.append(time.monotonic())
        if self.failing:
            raise RuntimeError("a broken round")
        return self.busy

    def count_within(self, seconds: float) -> int:
        before = len(self.times)
        time.sleep(seconds)
        return len(self.times) - before

    def wait_for(self, rounds: int, *, within: float) -> bool:
        deadline = time.monotonic() + within
        while len(self.times) < rounds and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(self.times) >= rounds

    def end(self) -> None:
        self.stop.set()
        if self.wake is not None:
            self.wake.set()
        self.thread.join(2.0)


@pytest.fixture
def long_fallback(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    # a fallback far past every wait below: whatever wakes the loop in these tests is the event
    monkeypatch.setattr(pacing, "FALLBACK_S", 30.0)
    yield


def test_without_work_the_loop_sleeps_until_woken_then_polls_while_there_is_work(long_fallback: None) -> None:
    loop = Rounds(wake=threading.Event())
    loop.thread.start()
    try:
        assert loop.wait_for(1, within=2.0)
        assert loop.count_within(0.5) == 0  # every POLL, it would have made ~50 rounds
        loop.busy = True
        woken = time.monotonic()
        assert loop.wake is not None
        loop.wake.set()
        assert loop.wait_for(2, within=2.0)
        assert loop.times[1] - woken < 0.5  # at once, not after the fallback
        assert loop.wait_for(12, within=2.0)  # and then every POLL (asleep: one round in 30 s)
        loop.busy = False
        assert loop.wait_for(len(loop.times) + 1, within=2.0)  # the round that finds no work
        assert loop.count_within(0.5) <= 1  # asleep again
    finally:
        loop.end()
    assert not loop.thread.is_alive()


def test_a_missed_wake_costs_one_fallback(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(pacing, "FALLBACK_S", 0.1)
    loop = Rounds(wake=threading.Event())
    loop.thread.start()
    try:
        assert loop.wait_for(4, within=3.0)  # nothing woke it: it looked again every FALLBACK_S
        gaps = [b - a for a, b in zip(loop.times, loop.times[1:], strict=False)]
        assert min(gaps) >= 0.09  # but not every POLL
    finally:
        loop.end()


def test_a_stop_ends_a_sleeping_loop_at_once(long_fallback: None) -> None:
    loop = Rounds(wake=threading.Event())
    loop.thread.start()
    assert loop.wait_for(1, within=2.0)
    started = time.monotonic()
    loop.end()  # as the daemon does: stop, then `Loop.wake`
    assert not loop.thread.is_alive()
    assert time.monotonic() - started < 1.0
    assert len(loop.times) == 1


def test_without_a_wake_event_the_loop_polls_whatever_a_round_says(long_fallback: None) -> None:
    loop = Rounds(wake=None)  # a check run by hand (`python -m …arbiter`)
    loop.thread.start()
    try:
        assert loop.wait_for(10, within=2.0)
    finally:
        loop.end()


def test_a_failing_round_is_tried_again_after_poll(long_fallback: None) -> None:
    loop = Rounds(wake=threading.Event())
    loop.failing = True
    loop.thread.start()
    try:
        assert loop.wait_for(5, within=2.0)  # logged, taken to have work: not asleep for the fallback
    finally:
        loop.end()
    assert not loop.thread.is_alive()
