"""The priority relay: while a high-priority claim on a GPU has work, the normal claims on it wait.

A high-priority claim's library counts its launches in its own region (`launches`, settled every 5 ms while
it launches); no other claim can read that region. The relay, part of the node daemon, polls those counts
every POLL and writes into the GPU's view, which every claim on the GPU maps read-only, until when normal
launches must wait: HOLD after the relay last *saw a count move*, on its own clock. The region is writable by
the claim's containers, so no number in it is believed: a stamp (`active_ns`) is ignored, and a count written
once (any value, by a process that then exits) moves once, which buys at most one hold. A hold therefore
lasts only while a live process of the high claim keeps launching (or keeps rewriting its count, which only
a live process of a claim an administrator made high can do), and ends at most HOLD + POLL after the count
stops: 60 ms, plus the normal claim's wait step (5 ms), under the 100 ms Tessera promises.

It polls only while a GPU has a high-priority claim; otherwise it sleeps until a refresh wakes it (pacing.py),
so a high-priority claim prepared meanwhile is relayed at once (within pacing.FALLBACK_S at worst).

Run alone for a check on a real GPU:
    python3 -m kubelet_plugin.host_parts.vgpu.priority_relay --view FILE --gpu UUID --high CLAIM_DIR \
        [--high …] --seconds N
"""

from __future__ import annotations

import argparse
import contextlib
import threading
import time
from collections.abc import Callable, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.libtessera.names import REGION_FILE_NAME
from dra_driver.libtessera.region_layout import RegionUnreadableError
from kubelet_plugin.host_parts.vgpu.pacing import pace
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.library_files.region import read_region

HOLD_NS = 50_000_000
POLL_S = 0.010

# held around a round's writes: yields whether to write at all (the daemon: this instance leads, and the
# GPUs given are those of the checkpoint on disk)
Writing = Callable[[], AbstractContextManager[bool]]


def unguarded() -> AbstractContextManager[bool]:
    return contextlib.nullcontext(True)


@dataclass(frozen=True, slots=True)
class RelayedGpu:
    uuid: str
    view: GpuView
    high_claim_dirs: tuple[Path, ...]


@dataclass(frozen=True, slots=True)
class Sighting:
    launches: int  # the count as last read
    moved_ns: int  # the relay's clock when it last saw the count move (0: never)


@dataclass(slots=True)
class LaunchEvidence:
    """What the relay saw of each high claim's launch count, on its own clock."""

    seen: dict[tuple[Path, str], Sighting] = field(default_factory=dict)

    def observe(self, uuid: str, claim_dir: Path, *, now_ns: int) -> int:
        """When the claim's count on the GPU last moved (0: not since the relay first read it)."""
        key = (claim_dir, uuid.lower())
        try:
            gpu = read_region(claim_dir / REGION_FILE_NAME, processes=False).gpu(uuid)
        except (RegionUnreadableError, OSError):
            gpu = None  # no region yet (nothing launched), or a broken one: no evidence from it
        count = gpu.launches if gpu is not None else 0
        before = self.seen.get(key)
        # the first reading is a baseline: a count found already high proves nothing about now
        moved = before is not None and count != before.launches
        sighting = Sighting(count, now_ns if moved else (before.moved_ns if before else 0))
        self.seen[key] = sighting
        return sighting.moved_ns

    def forget_except(self, keep: set[tuple[Path, str]]) -> None:
        for key in [k for k in self.seen if k not in keep]:
            del self.seen[key]


def relay_once(gpus: Sequence[RelayedGpu], evidence: LaunchEvidence, *, now_ns: int) -> None:
    keep: set[tuple[Path, str]] = set()
    for g in gpus:
        latest, active = 0, 0
        for d in g.high_claim_dirs:
            keep.add((d, g.uuid.lower()))
            moved = evidence.observe(g.uuid, d, now_ns=now_ns)
            if moved and now_ns - moved < HOLD_NS:
                latest, active = max(latest, moved), active + 1
        g.view.write_hold(hold_until_ns=latest + HOLD_NS if latest else 0, now_ns=now_ns, high_active=active)
    evidence.forget_except(keep)


def relay_round(
    gpus: Callable[[], Sequence[RelayedGpu]], evidence: LaunchEvidence, *, now_ns: int, writing: Writing
) -> None:
    """One round, inside `writing` (the GPUs asked for inside it), or none where it says no."""
    with writing() as may:
        if may:
            relay_once(gpus(), evidence, now_ns=now_ns)


def run(
    stop: threading.Event,
    gpus: Callable[[], Sequence[RelayedGpu]],
    *,
    writing: Writing = unguarded,
    evidence: LaunchEvidence | None = None,
    wake: threading.Event | None = None,
) -> None:
    """Relays until stop is set; `gpus` says, each round, which GPUs have high-priority claims. Every POLL
    while there is one, else asleep until `wake` is set (pacing.py; without `wake`, every POLL)."""
    seen = evidence if evidence is not None else LaunchEvidence()

    def one_round() -> bool:
        relay_round(gpus, seen, now_ns=time.monotonic_ns(), writing=writing)
        return bool(gpus())

    pace(stop, one_round, poll_s=POLL_S, wake=wake, what="priority relay")


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Relay high-priority claims' work into a GPU's view for a while.")
    p.add_argument("--view", type=Path, required=True)
    p.add_argument("--gpu", required=True, help="the GPU's UUID as the limits files name it")
    p.add_argument("--high", type=Path, action="append", default=[], help="a high-priority claim directory")
    p.add_argument("--seconds", type=float, required=True)
    a = p.parse_args(argv)
    view = GpuView(a.view)
    stop = threading.Event()
    timer = threading.Timer(a.seconds, stop.set)
    timer.start()
    try:
        run(stop, lambda: [RelayedGpu(a.gpu, view, tuple(a.high))])
    finally:
        timer.cancel()
        view.write_hold(hold_until_ns=0, now_ns=time.monotonic_ns(), high_active=0)
        view.close()


if __name__ == "__main__":
    main()
