"""Time division of one GPU between the vgpu claims on it (pure: data in, data out).

A GPU without MPS runs one context at a time and time-slices between contexts with work, so a claim's
kernels wait behind its neighbours' timeslices and every claim falls below its share (measured on an H100:
30:70 → 16:58 with a limiter that charged waiting time). Instead the node gives each claim a part of a
repeating frame: a claim with an SM share of c % runs only in its c % of every frame, and no two claims'
parts overlap, so each runs alone at full speed for exactly its share. Claims without a share (cores 0:
no limit, no reservation) share what no share reserved. High-priority claims have no part: they run when
they have work, up to their share, while the normal claims wait (the priority relay).

Work-conserving (docs/gpu-sharing.md, "Guarantee and ceiling"): a strict partition leaves a claim's part idle
whenever that claim has no work. So the node watches which claims have work (the arbiter in
kubelet_plugin/host_parts/vgpu) and lays the frame out for those only: each claim with work gets its share,
and the time the idle claims reserved is handed to the claims with work in proportion to their shares, up to
each one's ceiling (`coresLimit`). A claim that is the GPU's only claim with work, and every idle claim,
gets no part but a *free* entry: its launches start at once, up to its ceiling, so a waking claim does not
wait for a part; the arbiter gives it back its part within a frame of its first launch. Without knowledge
of who has work (`active=None`, e.g. right after the daemon starts), every claim is taken to have work:
the layout is the strict partition, which never gives a claim less than its share.

The result is what the GPU's view holds (`Part`, at most MAX_SLOTS entries: dra_driver/libtessera/
view_layout.py); the interception library reads it there, and each claim finds its part by the slot number its
limits file names.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from fractions import Fraction

from dra_driver.libtessera.view_layout import MAX_SLOTS, Part

DEFAULT_FRAME_US = 50_000


@dataclass(frozen=True, slots=True)
class SharingClaim:
    slot: int  # 1..65535, unique among the GPU's claims
    cores: int  # 0..100; 0 = no reservation
    high_priority: bool = False
    ceiling: int = 0  # what it may burst to (> cores); 0: its cores

    @property
    def top(self) -> int:
        """The most of the GPU it may get: its ceiling, else its share; a claim without a share has no
        limit."""
        return 100 if self.cores == 0 else max(self.cores, min(self.ceiling, 100))


def schedule(
    claims: Sequence[SharingClaim], *, frame_us: int = DEFAULT_FRAME_US, active: Collection[int] | None = None
) -> tuple[Part, ...]:
    """Each normal claim's entry: with `active` (the slots of the claims with work), the work-conserving
    layout; without, the strict partition (`partition`). High-priority claims get none."""
    if frame_us <= 0:
        raise ValueError(f"frame_us must be positive, got {frame_us}")
    if active is None:
        return partition(claims, frame_us=frame_us)
    normal = sorted((c for c in claims if not c.high_priority), key=lambda c: c.slot)
    busy = [c for c in normal if c.slot in active]
    if len(busy) <= 1:
        # nobody to keep apart: every claim starts at once, up to its ceiling
        return tuple(Part(c.slot, 0, 0, c.top) for c in normal)[:MAX_SLOTS]
    shared = [c for c in busy if c.cores > 0]
    unlimited = [c for c in busy if c.cores == 0]
    reserved = min(100, sum(c.cores for c in normal if c.cores > 0))
    # the claims without a share keep what no share reserved, as in the partition; the idle claims'
    # reservations go to the busy shares
    pool = Fraction(100 - sum(c.cores for c in shared)) - (100 - reserved if unlimited else 0)
    grown = _water_fill(shared, max(pool, Fraction(0)))
    parts: list[Part] = []
    at = 0
    for c in shared:
        end = min(frame_us, at + int(frame_us * grown[c.slot] / 100))
        if end > at:
            parts.append(Part(c.slot, at, end))
        at = end
    if at < frame_us:
        parts.extend(Part(c.slot, at, frame_us) for c in unlimited)
    parts.extend(Part(c.slot, 0, 0, c.top) for c in normal if c.slot not in active)
    return tuple(parts[:MAX_SLOTS])


def _water_fill(claims: Sequence[SharingClaim], pool: Fraction) -> dict[int, Fraction]:
    """Each claim's share plus its part of `pool`, given in proportion to the shares, each up to its top;
    what a capped claim cannot take goes to the others."""
    got = {c.slot: Fraction(c.cores) for c in claims}
    growing = [c for c in claims if c.top > c.cores]
    while pool > 0 and growing:
        weight = sum(c.cores for c in growing)
        capped = [c for c in growing if got[c.slot] + pool * c.cores / weight >= c.top]
        if not capped:
            for c in growing:
                got[c.slot] += pool * c.cores / weight
            break
        for c in capped:
            pool -= c.top - got[c.slot]
            got[c.slot] = Fraction(c.top)
        growing = [c for c in growing if c not in capped]
    return got


def partition(claims: Sequence[SharingClaim], *, frame_us: int = DEFAULT_FRAME_US) -> tuple[Part, ...]:
    """The strict partition: shares back to back in slot order, then one part shared by every claim without
    a share (what is left)."""
    normal = sorted((c for c in claims if not c.high_priority), key=lambda c: c.slot)
    reserved = [c for c in normal if c.cores > 0]
    parts: list[Part] = []
    at = 0
    for c in reserved:
        length = frame_us * min(c.cores, 100) // 100
        end = min(at + length, frame_us)
        if end > at:
            parts.append(Part(c.slot, at, end))
        at = end
    rest = [c for c in normal if c.cores == 0]
    if at < frame_us:
        parts.extend(Part(c.slot, at, frame_us) for c in rest)
    return tuple(parts[:MAX_SLOTS])


def free_slot(taken: set[int]) -> int:
    """The lowest slot number not taken (slot numbers are small and never 0)."""
    slot = 1
    while slot in taken:
        slot += 1
    return slot
