"""The priority relay's loop: a round every POLL while a GPU has a high-priority claim, asleep otherwise."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from kubelet_plugin.host_parts.vgpu import pacing
from kubelet_plugin.host_parts.vgpu.priority_relay import RelayedGpu, run
from kubelet_plugin.library_files.gpu_view import GpuView


def test_the_relay_polls_only_while_a_gpu_has_a_high_priority_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pacing, "FALLBACK_S", 30.0)  # whatever wakes the loop here is the event
    view = GpuView(tmp_path / "view")
    relayed: list[RelayedGpu] = []
    rounds: list[float] = []

    def gpus() -> list[RelayedGpu]:
        rounds.append(time.monotonic())
        return list(relayed)

    def rounds_within(seconds: float) -> int:
        before = len(rounds)
        time.sleep(seconds)
        return len(rounds) - before

    def wait_for(n: int) -> bool:
        deadline = time.monotonic() + 3.0
        while len(rounds) < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return len(rounds) >= n

    stop, wake = threading.Event(), threading.Event()
    thread = threading.Thread(target=run, args=(stop, gpus), kwargs={"wake": wake}, daemon=True)
    thread.start()
    try:
        assert wait_for(1)
        assert rounds_within(0.5) <= 2  # no high-priority claim: asleep (every POLL: ~100 calls)
        relayed.append(RelayedGpu("GPU-0", view, (tmp_path / "high",)))
        woken = time.monotonic()
        wake.set()  # as GpuSharing.refresh does
        assert wait_for(len(rounds) + 1)
        assert rounds[-1] - woken < 0.5  # at once, not after the fallback
        assert wait_for(len(rounds) + 20)  # then every POLL: holds end HOLD + POLL after a count stops
        relayed.clear()
        wake.set()
        time.sleep(0.05)
        assert rounds_within(0.5) <= 2  # the claim left: asleep again
    finally:
        stop.set()
        wake.set()
        thread.join(2.0)
    assert not thread.is_alive()
    view.close()
