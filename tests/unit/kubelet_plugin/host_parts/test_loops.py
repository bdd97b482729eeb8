"""A host part brings its own background loops; the daemon starts whatever every part returns, by name, and
knows no family's loop (the MPS watch and the priority relay used to be wired in by hand)."""

from __future__ import annotations

import contextlib
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.core.families.vgpu import NAME, GpuShare
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.host_parts import Hosts
from kubelet_plugin.host_parts.base import HostContext, Running
from kubelet_plugin.host_parts.mps import MpsHost
from kubelet_plugin.host_parts.vgpu import GpuSharing, pacing
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.record.steps import NO_OBSERVER
from tests.support.inventories import make_gpu, make_inventory


class Backend:
    def inventory(self) -> object:
        return make_inventory(make_gpu(0, "H100-80GB-SXM"))

    def close(self) -> None:
        pass


@contextlib.contextmanager
def nothing_held() -> Iterator[None]:
    yield


def test_each_part_names_its_loops_and_the_rest_have_none(tmp_path: Path) -> None:
    hosts = Hosts(HostContext(backend=Backend(), paths=PluginPaths.under(tmp_path), steps=NO_OBSERVER))  # type: ignore[arg-type]
    seen: list[str] = []
    running = Running(checkpoint=lambda: Checkpoint(boot_id="b"), exclusive=nothing_held)
    loops = {part.family: [loop.name for loop in part.loops(running)] for part in hosts}
    for names in loops.values():
        seen.extend(names)
    assert loops == {"gpu": [], "vgpu": ["priority-relay", "burst-arbiter"], "mps": ["mps-watch"], "mig": []}
    assert len(seen) == len(set(seen))  # thread names stay unique
    hosts.close()


def test_the_mps_watch_reads_the_checkpoint_the_daemon_gives_it(tmp_path: Path) -> None:
    hosts = Hosts(HostContext(backend=Backend(), paths=PluginPaths.under(tmp_path), steps=NO_OBSERVER))  # type: ignore[arg-type]
    part = next(p for p in hosts if isinstance(p, MpsHost))
    asked = threading.Event()

    def checkpoint() -> Checkpoint | None:
        asked.set()
        return None  # unreadable just now: the watch must treat it as "no GPU in use", not fail

    (loop,) = part.loops(Running(checkpoint=checkpoint, exclusive=nothing_held))
    assert part.watch is not None
    stop = threading.Event()
    thread = threading.Thread(target=loop.run, args=(stop,), daemon=True)
    thread.start()
    assert asked.wait(5.0), "the watch never asked which GPUs are in use"
    stop.set()
    thread.join(5.0)
    assert not thread.is_alive()
    hosts.close()


def shares(*shares: tuple[str, GpuShare]) -> Checkpoint:
    entries = [
        ClaimEntry(ClaimUID(uid), "ns", uid, ClaimState.PREPARE_COMPLETED).with_records(NAME, [share])
        for uid, share in shares
    ]
    return Checkpoint(boot_id="b").with_entries(entries)


def test_the_vgpu_loops_sleep_while_no_gpu_is_shared_and_a_refresh_wakes_them(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Issue #35: an idle daemon's arbiter and relay made a round every 10 ms (3.5 CPU-s a minute). Each
    round that may write the views asks `Running.leads` first: counted here, by loop."""
    monkeypatch.setattr(pacing, "FALLBACK_S", 30.0)  # whatever wakes a loop here is the refresh (or the stop)
    sharing = GpuSharing(gpus_dir=tmp_path / "gpus", claims_dir=tmp_path / "claims")
    rounds: Counter[str] = Counter()

    def leads() -> bool:
        rounds[threading.current_thread().name] += 1
        return True

    def within(seconds: float) -> Counter[str]:
        before = rounds.copy()
        time.sleep(seconds)
        return rounds - before

    def wait_for(loop: str, n: int) -> bool:
        deadline = time.monotonic() + 3.0
        while rounds[loop] < n and time.monotonic() < deadline:
            time.sleep(0.005)
        return rounds[loop] >= n

    running = Running(checkpoint=lambda: None, exclusive=nothing_held, leads=leads)
    loops = sharing.loops(running)
    stop = threading.Event()
    threads = [threading.Thread(target=x.run, args=(stop,), name=x.name, daemon=True) for x in loops]
    for thread in threads:
        thread.start()
    try:
        assert wait_for("burst-arbiter", 1)
        idle = within(0.5)
        assert idle["burst-arbiter"] <= 1, idle  # every 10 ms, ~50
        assert idle["priority-relay"] == 0, idle  # it never asks while no GPU has a high-priority claim
        gpu = GpuUUID("GPU-0")
        sharing.refresh(
            shares(
                ("a", GpuShare(gpu, 1, 30)),
                ("b", GpuShare(gpu, 2, 50)),
                ("h", GpuShare(gpu, 3, 20, high_priority=True)),
            )
        )  # a prepare: two claims share the GPU, and a high-priority one
        busy = within(0.5)
        assert busy["burst-arbiter"] >= 10, busy  # asleep, it would not have looked for 30 s
        assert busy["priority-relay"] >= 10, busy
        sharing.refresh(shares())  # their unprepare
        time.sleep(0.05)
        idle = within(0.5)
        assert idle["burst-arbiter"] <= 1 and idle["priority-relay"] <= 1, idle
    finally:
        stop.set()
        for loop in loops:
            loop.wake()  # as the daemon does once it sets stop
        for thread in threads:
            thread.join(2.0)
    assert not any(t.is_alive() for t in threads)  # a sleeping loop ends at once, not after the fallback
    sharing.close()
