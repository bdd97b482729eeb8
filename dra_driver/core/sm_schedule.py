"""Time division of one GPU between the vgpu claims on it (pure: data in, data out).

A GPU without MPS runs one context at a time and time-slices between contexts with work, so a claim's
kernels wait behind its neighbours' timeslices and every claim falls below its share (measured on an H100:
30:70 → 16:58 with a limiter that charged waiting time). Instead the node gives each claim a part of a
repeating frame: a claim with an SM share of c % runs only in its c % of every frame, and no two claims'
parts overlap, so each runs alone at full speed for exactly its share. Claims without a share (cores 0:
no limit, no reservation) share what no share reserved. High-priority claims have no part: they run when
they have work, up to their share, while the normal claims wait (the priority relay).

The interception library reads the result from the GPU's view (gpu_view.py); each claim finds its part by
the slot number its limits file names.
"""

from __future__ import annotations

from dataclasses import dataclass

DEFAULT_FRAME_US = 50_000
MAX_SLOTS = 64


@dataclass(frozen=True, slots=True)
class SharingClaim:
    slot: int  # 1..65535, unique among the GPU's claims
    cores: int  # 0..100; 0 = no reservation
    high_priority: bool = False


@dataclass(frozen=True, slots=True)
class Part:
    slot: int
    start_us: int
    end_us: int


def schedule(claims: list[SharingClaim], *, frame_us: int = DEFAULT_FRAME_US) -> tuple[Part, ...]:
    """Each normal claim's part of the frame: shares back to back in slot order, then one part shared by
    every claim without a share (what is left). High-priority claims get none."""
    if frame_us <= 0:
        raise ValueError(f"frame_us must be positive, got {frame_us}")
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
