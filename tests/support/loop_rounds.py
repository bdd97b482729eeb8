"""A paced loop's rounds, counted (the burst arbiter's and the priority relay's tests): the loop calls
`items` once a round, the test reads how many rounds came and waits for more."""

from __future__ import annotations

import time
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
