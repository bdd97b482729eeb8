"""The priority relay: while a high-priority claim on a GPU has work, the normal claims on it wait.

A high-priority claim's library stamps each launch in its own region (active_ns, CLOCK_MONOTONIC); no other
claim can read that region. The relay, part of the node daemon, reads those stamps and writes into the GPU's
view, which every claim on the GPU maps read-only, until when normal launches must wait: HOLD after the last
stamp. It polls every POLL, so a normal claim resumes at most HOLD + POLL (+ its own wait step, 5 ms) after
the high one goes idle: 65 ms by default, under the 100 ms Tessera promises. A stamp from the future (a
tenant writing its region) counts as now, so a hold never reaches past now + HOLD.

Run alone for a check on a real GPU:
    python3 -m kubelet_plugin.priority_relay --view FILE --gpu UUID --high CLAIM_DIR [--high …] --seconds N
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from kubelet_plugin.gpu_view import GpuView
from kubelet_plugin.region import REGION_FILE_NAME, RegionUnreadableError, read_region

HOLD_NS = 50_000_000
POLL_S = 0.010


@dataclass(frozen=True, slots=True)
class RelayedGpu:
    uuid: str
    view: GpuView
    high_claim_dirs: tuple[Path, ...]


def latest_stamp(uuid: str, claim_dirs: Sequence[Path], *, now_ns: int) -> tuple[int, int]:
    """The latest launch stamp of the GPU's high claims (clamped to now) and how many stamped in HOLD."""
    latest, active = 0, 0
    for d in claim_dirs:
        try:
            gpu = read_region(d / REGION_FILE_NAME, processes=False).gpu(uuid)
        except (RegionUnreadableError, OSError):
            continue  # no region yet (nothing launched), or a broken one: no hold from it
        if gpu is None or gpu.active_ns == 0:
            continue
        stamp = min(gpu.active_ns, now_ns)
        latest = max(latest, stamp)
        active += now_ns - stamp < HOLD_NS
    return latest, active


def relay_once(gpus: Sequence[RelayedGpu], *, now_ns: int) -> None:
    for g in gpus:
        latest, active = latest_stamp(g.uuid, g.high_claim_dirs, now_ns=now_ns)
        g.view.write_hold(hold_until_ns=latest + HOLD_NS if latest else 0, now_ns=now_ns, high_active=active)


def run(stop: threading.Event, gpus: Callable[[], Sequence[RelayedGpu]]) -> None:
    """Relays until stop is set; `gpus` says, each round, which GPUs have high-priority claims."""
    while not stop.is_set():
        relay_once(gpus(), now_ns=time.monotonic_ns())
        stop.wait(POLL_S)


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
