"""The burst arbiter: lays each shared GPU's frame out for the claims that have work (work-conserving).

Every POLL it reads the launch count of every normal claim on a GPU from that claim's own region (the
library adds one per launch that passed its gate); a claim has work while its count moved in the last
IDLE_NS, on the arbiter's own clock. When the set of claims with work changes, it writes the GPU's view
again (dra_driver/core/sm_schedule.py decides the layout): the busy claims divide the idle claims' time by
their shares up to their ceilings, and a claim that is the only one with work, or idle, starts at once up to
its ceiling. So the exchange stays one-way per claim: a claim's library writes only its own region, only
this daemon reads it, and the daemon alone writes the view every claim reads.

IDLE_NS is longer than the longest gap between launches of a claim with work (a claim with a small part
launches only in its part, once a frame), so a busy claim is never taken for idle. A waking claim starts at
once (it is free while idle), and the next round puts it back into the frame: its share is back within
POLL + one frame. A count a tenant writes into its region can only make its own claim look busy, which
gives it its share, never more, and takes nothing from another claim's guarantee.

Nothing is kept across a restart: the daemon writes the strict partition first (`GpuSharing.refresh`), and
the arbiter writes a GPU's layout only once it has watched the GPU for IDLE_NS.

It polls only while a view can still change (`Arbiter.settled`): while a GPU has two or more normal claims,
or a GPU's layout is not yet written for its claims; the promises above hold then. Otherwise (no GPU shared,
or each shared by one claim, which starts at once up to its ceiling whoever has work) it sleeps until a
refresh wakes it, or pacing.FALLBACK_S at worst (pacing.py): a claim prepared meanwhile is watched at once.

Run alone for a check on a real GPU (interceptor/gpu-check):
    python3 -m kubelet_plugin.host_parts.vgpu.arbiter --view FILE --gpu UUID \
        --claim SLOT:CORES:CEILING:CLAIM_DIR [--claim …] --seconds N
"""

from __future__ import annotations

import argparse
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

from dra_driver.core.sm_schedule import DEFAULT_FRAME_US, SharingClaim, partition, schedule
from dra_driver.libtessera.view_layout import Part
from kubelet_plugin.host_parts.vgpu.pacing import pace
from kubelet_plugin.host_parts.vgpu.priority_relay import LaunchEvidence
from kubelet_plugin.library_files.gpu_view import GpuView

POLL_S = 0.010
IDLE_NS = DEFAULT_FRAME_US * 1000 + 20_000_000


@dataclass(frozen=True, slots=True)
class ArbitratedGpu:
    uuid: str
    view: GpuView
    claims: tuple[SharingClaim, ...]  # the GPU's claims (high-priority ones have no part and are skipped)
    claim_dirs: tuple[Path, ...]  # each claim's shared directory (its region), in the order of `claims`
    frame_us: int = DEFAULT_FRAME_US


# writes a GPU's layout unless its claims changed meanwhile (then: False, nothing written)
Commit = Callable[[ArbitratedGpu, tuple[Part, ...]], bool]


def write_view(g: ArbitratedGpu, parts: tuple[Part, ...]) -> bool:
    g.view.write_schedule(parts, frame_us=g.frame_us)
    return True


@dataclass(slots=True)
class Arbiter:
    """What the arbiter knows between rounds: launch counts, since when it watches each GPU, and which set
    of busy claims each GPU's view was last written for."""

    evidence: LaunchEvidence = field(default_factory=LaunchEvidence)
    watched_since: dict[str, int] = field(default_factory=dict)
    written: dict[str, tuple[frozenset[int], tuple[SharingClaim, ...]]] = field(default_factory=dict)

    def busy(self, g: ArbitratedGpu, *, now_ns: int) -> frozenset[int]:
        """The slots of the GPU's normal claims whose launch count moved in the last IDLE_NS."""
        slots = set()
        for c, d in zip(g.claims, g.claim_dirs, strict=True):
            if c.high_priority:
                continue
            moved = self.evidence.observe(g.uuid, d, now_ns=now_ns)
            if moved and now_ns - moved < IDLE_NS:
                slots.add(c.slot)
        return frozenset(slots)

    def round(self, gpus: Sequence[ArbitratedGpu], *, now_ns: int, commit: Commit = write_view) -> None:
        keep = set()
        for g in gpus:
            keep.add(g.uuid)
            since = self.watched_since.setdefault(g.uuid, now_ns)
            busy = self.busy(g, now_ns=now_ns)
            if now_ns - since < IDLE_NS:
                continue  # not watched long enough to call anyone idle: the partition stays
            if self.written.get(g.uuid) == (busy, g.claims):
                continue
            if commit(g, schedule(g.claims, frame_us=g.frame_us, active=busy)):
                self.written[g.uuid] = (busy, g.claims)
        for uuid in [u for u in self.watched_since if u not in keep]:
            del self.watched_since[uuid]
            self.written.pop(uuid, None)
        self.evidence.forget_except(
            {(d, g.uuid.lower()) for g in gpus for d, c in zip(g.claim_dirs, g.claims, strict=True)}
        )

    def settled(self, gpus: Sequence[ArbitratedGpu]) -> bool:
        """Whether no round can change a view until the GPUs' claims change: no GPU has two normal claims
        (with one, its layout is the same whoever has work), and each GPU's layout is written for its
        claims. Until then the loop polls (pacing.py)."""
        for g in gpus:
            if sum(not c.high_priority for c in g.claims) > 1:
                return False
            written = self.written.get(g.uuid)
            if written is None or written[1] != g.claims:
                return False
        return True

    def forget(self, uuid: str) -> None:
        """The GPU's view was written anew (its claims changed): write its layout again next round."""
        self.written.pop(uuid, None)


def run(
    stop: threading.Event,
    gpus: Callable[[], Sequence[ArbitratedGpu]],
    arbiter: Arbiter,
    commit: Commit = write_view,
    *,
    wake: threading.Event | None = None,
) -> None:
    """Arbitrates until stop is set; `gpus` says, each round, which GPUs are shared and by whom. Every POLL
    while a view can still change, else asleep until `wake` is set (pacing.py; without `wake`, every POLL)."""

    def one_round() -> bool:
        shared = gpus()
        arbiter.round(shared, now_ns=time.monotonic_ns(), commit=commit)
        return not arbiter.settled(shared)

    pace(stop, one_round, poll_s=POLL_S, wake=wake, what="burst arbiter")


def _claim(text: str) -> tuple[SharingClaim, Path]:
    slot, cores, ceiling, claim_dir = text.split(":", 3)
    return SharingClaim(int(slot), int(cores), ceiling=int(ceiling)), Path(claim_dir)


def main(argv: Sequence[str] | None = None) -> None:
    p = argparse.ArgumentParser(description="Arbitrate one GPU's frame between claims for a while.")
    p.add_argument("--view", type=Path, required=True)
    p.add_argument("--gpu", required=True, help="the GPU's UUID as the limits files name it")
    p.add_argument("--claim", type=_claim, action="append", default=[], help="SLOT:CORES:CEILING:CLAIM_DIR")
    p.add_argument("--seconds", type=float, required=True)
    p.add_argument("--frame-us", type=int, default=DEFAULT_FRAME_US)
    a = p.parse_args(argv)
    claims = tuple(c for c, _ in a.claim)
    view = GpuView(a.view)
    view.write_schedule(partition(claims, frame_us=a.frame_us), frame_us=a.frame_us)
    gpu = ArbitratedGpu(a.gpu, view, claims, tuple(d for _, d in a.claim), a.frame_us)
    stop = threading.Event()
    timer = threading.Timer(a.seconds, stop.set)
    timer.start()
    try:
        run(stop, lambda: [gpu], Arbiter())
    finally:
        timer.cancel()
        view.close()


if __name__ == "__main__":
    main()
