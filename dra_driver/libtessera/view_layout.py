"""A GPU's view: the file every vgpu claim's library on that GPU maps read-only, its layout and its schedule
encoded and decoded (pure).

Layout: interceptor/src/view.h, version 2 (a 64-byte header and MAX_SLOTS slot entries at the start of a
4096-byte file): the GPU's time-division schedule (dra_driver/core/sm_schedule.py lays it out) under a
sequence lock, and until when normal-priority claims must hold their launches back (the priority relay).
Version 2 gives a slot entry's last word a meaning (`free_pct`: no part, start at once up to that %); a
version-1 file (an older daemon's) is formatted again as version 2. The node writes it in place
(kubelet_plugin/library_files/gpu_view.py); each claim finds its entry by the slot its limits file names.
"""

from __future__ import annotations

import struct
from dataclasses import dataclass

MAGIC = 0x0057565550475354  # "TSGPUVW"
VERSION = 2
FILE_SIZE = 4096
HEADER = struct.Struct("<QII")  # magic version size
HOLD_OFFSET = 16
HOLD = struct.Struct("<QQQ")  # hold_until_ns updated_ns high_active
SEQ_OFFSET = 40
SCHEDULE = struct.Struct("<IIII")  # seq nslots frame_us reserved
SLOTS_OFFSET = 64
SLOT = struct.Struct("<IIII")  # id start_us end_us free_pct
# The entries a view holds (TV_MAX_SLOTS, checked equal by tests/integration/test_view_contract.py): one per
# normal claim at most, so it also bounds how many claims one GPU takes (`sharesPerGpu`, capacity.py).
MAX_SLOTS = 64
VIEW_SIZE = SLOTS_OFFSET + SLOT.size * MAX_SLOTS


@dataclass(frozen=True, slots=True)
class Part:
    """A claim's entry in the view: its part [start_us, end_us) of every frame, or, with no part, a free
    entry whose launches start at once up to free_pct % of the GPU's time."""

    slot: int
    start_us: int
    end_us: int
    free_pct: int = 0  # no part (start == end): its launches start at once, up to this % of the time

    @property
    def free(self) -> bool:
        return self.free_pct > 0 and self.start_us == self.end_us


def is_current(head: bytes) -> bool:
    """Whether a view's first HEADER.size bytes are this version's header (else it is formatted again)."""
    return HEADER.unpack_from(head) == (MAGIC, VERSION, VIEW_SIZE)


def blank() -> bytes:
    """A formatted view with an empty schedule (sequence 2: even, not being written)."""
    data = bytearray(FILE_SIZE)
    HEADER.pack_into(data, 0, MAGIC, VERSION, VIEW_SIZE)
    SCHEDULE.pack_into(data, SEQ_OFFSET, 2, 0, 0, 0)
    return bytes(data)


def schedule_head(seq: int, parts: tuple[Part, ...], *, frame_us: int) -> bytes:
    """The schedule's header at SEQ_OFFSET: its sequence number, entry count and frame."""
    return SCHEDULE.pack(seq, min(len(parts), MAX_SLOTS), frame_us, 0)


def slot_entries(parts: tuple[Part, ...]) -> bytes:
    """Every slot entry (MAX_SLOTS, unused ones zero) at SLOTS_OFFSET; parts past MAX_SLOTS are left out."""
    data = bytearray(SLOT.size * MAX_SLOTS)
    for i, p in enumerate(parts[:MAX_SLOTS]):
        SLOT.pack_into(data, i * SLOT.size, p.slot, p.start_us, p.end_us, p.free_pct)
    return bytes(data)


def schedule(view: bytes) -> tuple[int, tuple[Part, ...]]:
    """(frame_us, parts) as the library reads them from a view's first VIEW_SIZE bytes."""
    _seq, n, frame_us, _ = SCHEDULE.unpack_from(view, SEQ_OFFSET)
    parts = [Part(*SLOT.unpack_from(view, SLOTS_OFFSET + i * SLOT.size)) for i in range(min(n, MAX_SLOTS))]
    return frame_us, tuple(parts)
