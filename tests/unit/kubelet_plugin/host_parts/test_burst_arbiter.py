"""The burst arbiter: from the launch counts in the claims' own regions to the GPU's layout."""

from __future__ import annotations

import threading
import time
from pathlib import Path

import pytest

from dra_driver.core.families.vgpu import NAME, GpuShare
from dra_driver.core.sm_schedule import SharingClaim, partition
from dra_driver.libtessera.region_layout import (
    GPU,
    GPUS_OFFSET,
    HEADER,
    MAGIC,
    MAX_GPUS,
    MAX_PROCS,
    SIZE,
    VERSION,
)
from dra_driver.libtessera.view_layout import Part
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.host_parts.vgpu import GpuSharing, pacing
from kubelet_plugin.host_parts.vgpu.arbiter import IDLE_NS, Arbiter, ArbitratedGpu, run
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from tests.support.loop_rounds import LoopRounds

UUID = "GPU-0"
MS = 1_000_000


def region(claim_dir: Path, launches: int) -> None:
    """A region as the library leaves it: one GPU entry whose launch count is `launches`."""
    data = bytearray(SIZE)
    HEADER.pack_into(data, 0, MAGIC, VERSION, GPUS_OFFSET, SIZE, MAX_GPUS, MAX_PROCS, 0, 0)
    GPU.pack_into(data, GPUS_OFFSET, UUID.encode(), *([0] * 6), launches, *([0] * 10))
    claim_dir.mkdir(parents=True, exist_ok=True)
    (claim_dir / "region").write_bytes(bytes(data))


def layout(view: GpuView) -> list[tuple[int, int, int, int]]:
    return [(p.slot, p.start_us, p.end_us, p.free_pct) for p in view.read_schedule()[1]]


def test_the_frame_follows_the_claims_that_have_work(tmp_path: Path) -> None:
    claims = (SharingClaim(1, 30, ceiling=100), SharingClaim(2, 70))
    dirs = (tmp_path / "a", tmp_path / "b")
    view = GpuView(tmp_path / "view")
    view.write_schedule(partition(claims), frame_us=50_000)
    gpu = ArbitratedGpu(UUID, view, claims, dirs)
    arbiter, now, count = Arbiter(), 0, {1: 0, 2: 0}

    def tick(ms: int, *busy: int) -> None:
        nonlocal now
        for _ in range(ms // 10):
            now += 10 * MS
            for slot in busy:
                count[slot] += 1
            for slot, d in zip((1, 2), dirs, strict=True):
                region(d, count[slot])
            arbiter.round([gpu], now_ns=now)

    strict = [(1, 0, 15_000, 0), (2, 15_000, 50_000, 0)]
    tick(IDLE_NS // MS - 20, 1)
    assert layout(view) == strict  # not watched long enough to call the 70 % claim idle
    tick(40, 1)
    # only the 30 % claim has work: it starts at once, up to its ceiling; the idle one may start at once too
    assert layout(view) == [(1, 0, 0, 100), (2, 0, 0, 70)]
    tick(10, 1, 2)
    assert layout(view) == strict  # the 70 % claim woke: both get their share back on the next round
    tick(IDLE_NS // MS + 20, 2)
    assert layout(view) == [(1, 0, 0, 100), (2, 0, 0, 70)]
    view.close()


def test_a_layout_refused_by_the_commit_is_written_on_a_later_round(tmp_path: Path) -> None:
    claims = (SharingClaim(1, 50, ceiling=80), SharingClaim(2, 50))
    dirs = (tmp_path / "a", tmp_path / "b")
    view = GpuView(tmp_path / "view")
    gpu = ArbitratedGpu(UUID, view, claims, dirs)
    arbiter = Arbiter()
    for d in dirs:
        region(d, 0)
    commits: list[tuple[Part, ...]] = []

    def refuse(g: ArbitratedGpu, parts: tuple[Part, ...]) -> bool:
        commits.append(parts)
        return False

    arbiter.round([gpu], now_ns=1)
    arbiter.round([gpu], now_ns=IDLE_NS + 2, commit=refuse)
    arbiter.round([gpu], now_ns=IDLE_NS + 3, commit=refuse)
    assert len(commits) == 2  # nothing was recorded as written, so it is tried again
    arbiter.round([gpu], now_ns=IDLE_NS + 4)
    assert layout(view) == [(1, 0, 0, 80), (2, 0, 0, 50)]
    view.close()


def test_a_gpu_whose_region_is_missing_or_forged_gives_no_claim_more_than_its_ceiling(tmp_path: Path) -> None:
    claims = (SharingClaim(1, 20, ceiling=40), SharingClaim(2, 80))
    dirs = (tmp_path / "a", tmp_path / "b")
    view = GpuView(tmp_path / "view")
    gpu = ArbitratedGpu(UUID, view, claims, dirs)
    arbiter = Arbiter()
    (tmp_path / "a").mkdir()
    (tmp_path / "a" / "region").write_bytes(b"garbage")
    region(dirs[1], 5)
    arbiter.round([gpu], now_ns=1)
    region(dirs[1], 2**64 - 1)  # a tenant's count: its own claim looks busy, nothing more
    arbiter.round([gpu], now_ns=IDLE_NS + 2)
    assert layout(view) == [(1, 0, 0, 40), (2, 0, 0, 80)]
    view.close()


def checkpoint(*shares: tuple[str, GpuShare]) -> Checkpoint:
    entries = [
        ClaimEntry(ClaimUID(uid), "ns", uid, ClaimState.PREPARE_COMPLETED).with_records(NAME, [share])
        for uid, share in shares
    ]
    return Checkpoint(boot_id="b").with_entries(entries)


def test_the_host_part_keeps_the_arbiters_layout_until_a_gpus_claims_change(tmp_path: Path) -> None:
    sharing = GpuSharing(gpus_dir=tmp_path / "gpus", claims_dir=tmp_path / "claims")
    gpu = GpuUUID(UUID)
    a, b = GpuShare(gpu, 1, 30, ceiling=100), GpuShare(gpu, 2, 70)
    sharing.refresh(checkpoint(("a", a), ("b", b)))
    view = GpuView(tmp_path / "gpus" / UUID / "view")
    strict = [(1, 0, 15_000, 0), (2, 15_000, 50_000, 0)]
    assert layout(view) == strict
    (arbitrated,) = sharing.arbitrated()
    assert arbitrated.claim_dirs == (
        tmp_path / "claims" / "a" / "shared",
        tmp_path / "claims" / "b" / "shared",
    )
    free = (Part(1, 0, 0, 100), Part(2, 0, 0, 70))
    assert sharing.commit_layout(arbitrated, free)
    sharing.refresh(checkpoint(("a", a), ("b", b)))  # another claim's prepare elsewhere on the node
    assert layout(view) == [(1, 0, 0, 100), (2, 0, 0, 70)]
    sharing.refresh(
        checkpoint(("a", a))
    )  # b left: the partition of what is left, until the arbiter's next look
    assert layout(view) == [(1, 0, 15_000, 0)]
    assert not sharing.commit_layout(arbitrated, free)  # a layout made for the claims before is not written
    assert layout(view) == [(1, 0, 15_000, 0)]
    view.close()
    sharing.close()


def test_a_failing_round_does_not_end_the_loop() -> None:
    stop, calls = threading.Event(), [0]

    def gpus() -> list[ArbitratedGpu]:
        calls[0] += 1
        if calls[0] == 1:
            raise RuntimeError("a broken round")
        stop.set()
        return []

    run(stop, gpus, Arbiter())
    assert calls[0] == 2


def test_the_arbiter_is_settled_once_no_view_can_change_until_the_claims_do(tmp_path: Path) -> None:
    view = GpuView(tmp_path / "view")
    dirs = (tmp_path / "a", tmp_path / "b")
    one = ArbitratedGpu(UUID, view, (SharingClaim(1, 30, ceiling=100),), dirs[:1])
    high = SharingClaim(2, 20, high_priority=True)
    with_high = ArbitratedGpu(UUID, view, (SharingClaim(1, 30), high), dirs)
    two = ArbitratedGpu(UUID, view, (SharingClaim(1, 30), SharingClaim(2, 70)), dirs)
    arbiter = Arbiter()
    assert arbiter.settled([])
    arbiter.round([one], now_ns=1)
    assert not arbiter.settled([one])  # watched, not laid out yet
    arbiter.round([one], now_ns=IDLE_NS + 2)
    assert layout(view) == [(1, 0, 0, 100)]  # a lone claim starts at once, up to its ceiling, busy or not
    assert arbiter.settled([one])
    assert not arbiter.settled([with_high])  # its claims changed: its layout is not written yet
    arbiter.round([with_high], now_ns=IDLE_NS + 3)
    assert layout(view) == [(1, 0, 0, 30)]  # the high-priority claim has no part: the relay's business
    assert arbiter.settled([with_high])
    arbiter.round([two], now_ns=IDLE_NS + 4)
    assert not arbiter.settled([two])  # two claims: who has work decides the layout, every POLL
    view.close()


def test_the_loop_polls_while_a_view_can_change_and_sleeps_until_woken_otherwise(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(pacing, "FALLBACK_S", 30.0)  # whatever wakes the loop here is the event
    view = GpuView(tmp_path / "view")
    dirs = (tmp_path / "a", tmp_path / "b")
    for d in dirs:
        region(d, 0)
    rounds: LoopRounds[ArbitratedGpu] = LoopRounds()
    shared = rounds.given
    with rounds.running(run, Arbiter()) as wake:
        assert rounds.wait_for(1)
        assert rounds.within(0.5) <= 1  # no GPU shared: asleep (every POLL, ~50 rounds)
        shared.append(ArbitratedGpu(UUID, view, (SharingClaim(1, 30), SharingClaim(2, 70)), dirs))
        wake.set()  # as GpuSharing.refresh does
        assert rounds.wait_for(len(rounds.at) + 20)  # two claims share a GPU: a round every POLL
        shared[0] = ArbitratedGpu(UUID, view, (SharingClaim(1, 30, ceiling=100),), dirs[:1])
        wake.set()
        deadline = time.monotonic() + 3.0
        while layout(view) != [(1, 0, 0, 100)] and time.monotonic() < deadline:
            time.sleep(0.01)
        assert layout(view) == [(1, 0, 0, 100)]  # one claim left: laid out once, IDLE_NS on
        time.sleep(0.05)  # (the round that wrote it, and the one after a wake it may have left set)
        assert rounds.within(0.5) <= 1  # then asleep: nothing can change until its claims do
    view.close()
