"""The priority relay's loop: a round every POLL while a GPU has a high-priority claim, asleep otherwise."""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from kubelet_plugin.host_parts.vgpu import pacing
from kubelet_plugin.host_parts.vgpu.priority_relay import RelayedGpu, run
from kubelet_plugin.library_files.gpu_view import GpuView
from tests.support.loop_rounds import LoopRounds


def test_the_relay_polls_only_while_a_gpu_has_a_high_priority_claim(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pacing, "FALLBACK_S", 30.0)  # whatever wakes the loop here is the event
    view = GpuView(tmp_path / "view")
    rounds: LoopRounds[RelayedGpu] = LoopRounds()
    relayed = rounds.given

    with rounds.running(run) as wake:
        assert rounds.wait_for(1)
        assert rounds.within(0.5) <= 2  # no high-priority claim: asleep (every POLL: ~100 calls)
        relayed.append(RelayedGpu("GPU-0", view, (tmp_path / "high",)))
        woken = time.monotonic()
        wake.set()  # as GpuSharing.refresh does
        assert rounds.wait_for(len(rounds.at) + 1)
        assert rounds.at[-1] - woken < 0.5  # at once, not after the fallback
        assert rounds.wait_for(
            len(rounds.at) + 20
        )  # then every POLL: holds end HOLD + POLL after a count stops
        relayed.clear()
        wake.set()
        time.sleep(0.05)
        assert rounds.within(0.5) <= 2  # the claim left: asleep again
    view.close()
