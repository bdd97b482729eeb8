"""A paced loop's rounds, counted (the burst arbiter's and the priority relay's tests): the loop calls
`items` once a round, the test reads how many rounds came and waits for more; `running` runs the loop on a
thread and stops it as the daemon does."""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from typing import Generic, TypeVar

T = TypeVar("T")


class LoopRounds(Generic[T]):
    """`items` is what the loop is given each round (the test changes the list in place); `at` the time of
    each round."""

    def __init__(self) -> None:
        self.given: list[T] = []
        self.at: list[float] = []

    def items(self) -> list[T]:
        self.at.append(time.monotonic())
        return list(self.given)

    def within(self, seconds: float) -> int:
        """How many rounds come in the next `seconds`."""
        before = len(self.at)
        time.sleep(seconds)
        return len(self.at) - before

    def wait_for(self, n: int, *, timeout_s: float = 3.0) -> bool:
        """Whether the loop has made `n` rounds in all, within `timeout_s`."""
        deadline = time.monotonic() + timeout_s
        while len(self.at) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(self.at) >= n

    @contextmanager
    def running(self, loop: Callable[..., None], *args: object) -> Iterator[threading.Event]:
        """`loop(stop, self.items, *args, wake=wake)` on a thread of its own; yields `wake`. On the way out
        the loop is stopped and woken, as the daemon stops it, and must end at once (not after its
        fallback sleep)."""
        stop, wake = threading.Event(), threading.Event()
        thread = threading.Thread(
            target=loop, args=(stop, self.items, *args), kwargs={"wake": wake}, daemon=True
        )
        thread.start()
        try:
            yield wake
        finally:
            stop.set()
            wake.set()
            thread.join(2.0)
        assert not thread.is_alive(), "the loop did not end within 2 s of its stop"
