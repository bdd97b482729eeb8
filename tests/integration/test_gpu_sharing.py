"""The daemon's side of GPU sharing against the C library: the view it writes (time-division schedule,
priority holds) is what the library reads, and the relay holds normal claims back while a high one works."""

from __future__ import annotations

import os
import struct
import threading
import time
from pathlib import Path

import pytest

from dra_driver.core.sm_schedule import SharingClaim, partition, schedule
from dra_driver.libtessera.names import REGION_FILE_NAME
from dra_driver.libtessera.region_layout import GPU, GPUS_OFFSET
from kubelet_plugin.host_parts.vgpu import arbiter
from kubelet_plugin.host_parts.vgpu.priority_relay import HOLD_NS, RelayedGpu, run
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.library_files.region import read_region
from tests.support.doubles.interceptor_programs import FAKE_GPU0, TSHARE, claim_dir, env, start, values

# SM shares are wall-clock measurements that a busy machine only lowers: like the library's own tests, the
# checks are ceilings (never more than the share + 5) and floors far below (clearly used); a miss is retried.
ATTEMPTS = 3


def _shares(tmp_path: Path, cores: list[int], *, secs: float = 1.0) -> list[float]:
    view = GpuView(tmp_path / "gpus" / FAKE_GPU0 / "view")
    claims = [SharingClaim(slot, c) for slot, c in enumerate(cores, start=1)]
    view.write_schedule(schedule(claims), frame_us=50_000)
    procs = []
    for c in claims:
        d = claim_dir(
            tmp_path, f"c{c.slot}", f"gpu {FAKE_GPU0} cores {c.cores} slot {c.slot} view {view.path}"
        )
        (d / "region").unlink(missing_ok=True)
        procs.append(start(TSHARE, "sm", "-1", str(secs), "kernel", env=env(d, tmp_path / "gpu")))
    outs = [p.communicate(timeout=60)[0] for p in procs]
    view.close()
    return [values(o, "share")[0] for o in outs]


@pytest.mark.parametrize("cores", [[30, 70], [20, 30, 50]])
def test_schedule_written_by_the_daemon_divides_the_gpu(tmp_path: Path, cores: list[int]) -> None:
    for attempt in range(ATTEMPTS):
        got = _shares(tmp_path / str(attempt), cores)
        if all(c / 2 <= s <= c + 5 for s, c in zip(got, cores, strict=True)):
            return
    pytest.fail(f"shares {got} for {cores}")


def test_a_high_priority_claim_holds_normal_ones_back_through_the_relay(tmp_path: Path) -> None:
    for attempt in range(ATTEMPTS):
        root = tmp_path / str(attempt)
        view = GpuView(root / "gpus" / FAKE_GPU0 / "view")
        view.write_schedule(schedule([SharingClaim(1, 0)]), frame_us=50_000)
        high = claim_dir(root, "high", f"gpu {FAKE_GPU0} cores 0 priority 0")
        normal = claim_dir(root, "normal", f"gpu {FAKE_GPU0} cores 0 priority 1 slot 1 view {view.path}")
        stop = threading.Event()
        relayed = [RelayedGpu(FAKE_GPU0, view, (high,))]
        relay = threading.Thread(target=run, args=(stop, lambda relayed=relayed: relayed))
        relay.start()
        try:
            lo = start(TSHARE, "gaps", "3", "1000", env=env(normal, root / "gpu"))
            hi_solo = start(TSHARE, "gaps", "0.5", "1000", env=env(high, root / "solo"))
            solo = values(hi_solo.communicate(timeout=60)[0], "share")[0]
            hi = start(TSHARE, "gaps", "1", "1000", env=env(high, root / "gpu"))
            hi_out = hi.communicate(timeout=60)[0]
            lo_out = lo.communicate(timeout=60)[0]
        finally:
            stop.set()
            relay.join()
            view.close()
        hi_share, hi_end = values(hi_out, "share")[0], values(hi_out, "end")[0]
        starts, ends = values(lo_out, "gap_start"), values(lo_out, "gap_end")
        held = [(s, e) for s, e in zip(starts, ends, strict=True) if s < hi_end < e]
        resumed_ms = (held[0][1] - hi_end) * 1000 if held else None
        # the high claim keeps (nearly) its solo speed; the normal one stood still meanwhile and resumed fast
        if resumed_ms is not None and hi_share >= 0.8 * solo and resumed_ms <= 100:
            return
    pytest.fail(
        f"high share {hi_share} (solo {solo}), normal resumed {resumed_ms} ms after it stopped\n{lo_out}"
    )


def _holds(view: GpuView, seconds: float) -> list[int]:
    """The holds the view put on normal claims within `seconds` (sampled every ms), each as how long it still
    had to run when first seen, in ns. Counted, not timed: a busy machine delays the samples, not the holds'
    number or length."""
    seen: dict[int, int] = {}
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        until, now = view.hold_until_ns(), time.monotonic_ns()
        if until > now:
            seen.setdefault(until, until - now)
        time.sleep(0.001)
    return list(seen.values())


def test_a_forged_far_future_stamp_of_an_exited_high_claim_holds_nobody(tmp_path: Path) -> None:
    """Issue #20, attack 2: a high claim's process writes active_ns = 2^64-1 (and a launch count) into its
    region once and exits. The relay believes only launch counts it sees move, so the normal claims are held
    at most one HOLD after the write, then never again; before, they were held 100 % of the time."""
    view = GpuView(tmp_path / "gpus" / FAKE_GPU0 / "view")
    high = claim_dir(tmp_path, "high", f"gpu {FAKE_GPU0} cores 0 priority 0")
    # a real process of the high claim formats the region (and launches), then exits
    out = start(TSHARE, "gaps", "0.2", "1000", env=env(high, tmp_path / "gpu")).communicate(timeout=60)[0]
    assert values(out, "share"), out
    region = read_region(high / REGION_FILE_NAME, processes=False).gpu(FAKE_GPU0)
    assert region is not None and region.launches > 0
    entry = GPUS_OFFSET + region.entry * GPU.size
    stop = threading.Event()
    relay = threading.Thread(target=run, args=(stop, lambda: [RelayedGpu(FAKE_GPU0, view, (high,))]))
    relay.start()
    try:
        time.sleep(0.1)  # the relay's first reading of the count is its baseline
        fd = os.open(high / REGION_FILE_NAME, os.O_WRONLY)
        try:  # the tenant's write: launches (offset 104) and active_ns (offset 112) of its entry
            os.pwrite(fd, struct.pack("<QQ", region.launches + 1, 2**64 - 1), entry + 104)
        finally:
            os.close(fd)
        first = _holds(view, 0.5)  # the one hold the moved count bought
        later = _holds(view, 0.5)
    finally:
        stop.set()
        relay.join()
        view.close()
    assert len(first) <= 1 and all(left <= HOLD_NS for left in first), first  # believed: a hold every POLL
    assert later == [], later


def test_a_claim_with_a_ceiling_bursts_into_idle_time_and_its_region_counts_it(tmp_path: Path) -> None:
    """The daemon's arbiter and the library: a 30 % claim with a ceiling of 100, alone with work beside an
    idle 70 % claim, runs far above its share; the time above it is what the library counts in burst_ns and
    the daemon reads (tessera_claim_burst_seconds_total); a claim without a ceiling counts none."""
    for attempt in range(ATTEMPTS):
        root = tmp_path / str(attempt)
        view = GpuView(root / "gpus" / FAKE_GPU0 / "view")
        claims = (SharingClaim(1, 30, ceiling=100), SharingClaim(2, 70))
        view.write_schedule(partition(claims), frame_us=50_000)
        burst = claim_dir(
            root, "burst", f"gpu {FAKE_GPU0} cores 30 ceiling 100 slot 1 view {view.path}", version=2
        )
        idle = claim_dir(root, "idle", f"gpu {FAKE_GPU0} cores 70 slot 2 view {view.path}")
        gpu = arbiter.ArbitratedGpu(FAKE_GPU0, view, claims, (burst, idle))
        stop = threading.Event()
        thread = threading.Thread(target=arbiter.run, args=(stop, lambda gpu=gpu: [gpu], arbiter.Arbiter()))
        thread.start()
        try:
            time.sleep(0.2)  # past the time the arbiter watches a GPU before it calls a claim idle
            out = start(TSHARE, "sm", "-1", "1", "kernel", "2650", env=env(burst, root / "gpu")).communicate(
                timeout=60
            )[0]
        finally:
            stop.set()
            thread.join()
            view.close()
        share = values(out, "share")[0]
        region = read_region(burst / REGION_FILE_NAME, processes=False).gpu(FAKE_GPU0)
        assert region is not None
        # above its guarantee: everything over 30 % of the run, less one window's tolerance
        above = region.burst_ns / 1e9
        if share >= 80 and (share - 30) / 100 - 0.1 <= above <= (share - 30) / 100 + 0.05:
            return
    pytest.fail(f"share {share} %, burst {above} s over a 1 s run\n{out}")


def test_a_claim_without_a_ceiling_counts_no_burst(tmp_path: Path) -> None:
    view = GpuView(tmp_path / "gpus" / FAKE_GPU0 / "view")
    view.write_schedule(schedule([SharingClaim(1, 30)], active={1}), frame_us=50_000)
    d = claim_dir(tmp_path, "plain", f"gpu {FAKE_GPU0} cores 30 slot 1 view {view.path}")
    out = start(TSHARE, "sm", "-1", "0.5", "kernel", "2650", env=env(d, tmp_path / "gpu")).communicate(
        timeout=60
    )[0]
    view.close()
    region = read_region(d / REGION_FILE_NAME, processes=False).gpu(FAKE_GPU0)
    assert region is not None and region.gpu_ns > 0, out
    assert values(out, "share")[0] <= 35 and region.burst_ns == 0
