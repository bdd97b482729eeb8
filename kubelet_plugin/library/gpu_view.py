"""The node's view of one GPU, the file the interception library of every vgpu claim on it maps read-only.

Layout: interceptor/src/view.h, version 2 (a 64-byte header and 64 slot entries at the start of a 4096-byte
file): the time-division schedule (sm_schedule.py) under a sequence lock, and until when normal-priority
claims must hold their launches back (the priority relay). Version 2 gives a slot entry's last word a
meaning (`free_pct`: no part, start at once up to that %); a version-1 file (an older daemon's) is formatted
again as version 2. A library that mapped it as version 1 before an upgrade finds no part in a free entry
and falls back to its token bucket at its cores. The daemon creates the file once and then only
writes into it in place: containers keep it mapped, so it is never replaced. Only the daemon can write it
(0644, in a directory containers mount read-only), so no claim can hold another back.
"""

from __future__ import annotations

import mmap
import os
import struct
from pathlib import Path

from dra_driver.core.sm_schedule import MAX_SLOTS, Part
from dra_driver.vocabulary.errors import StorageError

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
VIEW_SIZE = SLOTS_OFFSET + SLOT.size * MAX_SLOTS
VIEW_FILE_NAME = "view"
FILE_MODE = 0o644


class GpuView:
    """One GPU's view file, mapped for writing."""

    def __init__(self, path: Path) -> None:
        self.path = path
        try:
            path.parent.mkdir(parents=True, exist_ok=True)
            fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, FILE_MODE)
        except OSError as e:
            raise StorageError(f"opening the GPU view {path}: {e.strerror or e}") from e
        try:
            os.fchmod(fd, FILE_MODE)
            if os.fstat(fd).st_size != FILE_SIZE:
                os.ftruncate(fd, 0)
                os.ftruncate(fd, FILE_SIZE)
            self._map = mmap.mmap(fd, FILE_SIZE, mmap.MAP_SHARED, mmap.PROT_READ | mmap.PROT_WRITE)
        except OSError as e:
            raise StorageError(f"preparing the GPU view {path}: {e.strerror or e}") from e
        finally:
            os.close(fd)
        magic, version, size = HEADER.unpack_from(self._map, 0)
        if (magic, version, size) != (MAGIC, VERSION, VIEW_SIZE):
            self._map[:] = bytes(FILE_SIZE)
            SCHEDULE.pack_into(self._map, SEQ_OFFSET, 2, 0, 0, 0)
            HEADER.pack_into(self._map, 0, MAGIC, VERSION, VIEW_SIZE)

    def close(self) -> None:
        self._map.close()

    def write_schedule(self, parts: tuple[Part, ...], *, frame_us: int) -> None:
        """Publish the parts under the sequence lock: readers see the old schedule or the new, never a mix."""
        seq, _, _, _ = SCHEDULE.unpack_from(self._map, SEQ_OFFSET)
        seq |= 1  # odd: being written
        SCHEDULE.pack_into(self._map, SEQ_OFFSET, seq, 0, frame_us, 0)
        for i in range(MAX_SLOTS):
            entry = (
                (parts[i].slot, parts[i].start_us, parts[i].end_us, parts[i].free_pct)
                if i < len(parts)
                else (0, 0, 0, 0)
            )
            SLOT.pack_into(self._map, SLOTS_OFFSET + i * SLOT.size, *entry)
        SCHEDULE.pack_into(self._map, SEQ_OFFSET, seq, min(len(parts), MAX_SLOTS), frame_us, 0)
        SCHEDULE.pack_into(self._map, SEQ_OFFSET, seq + 1, min(len(parts), MAX_SLOTS), frame_us, 0)

    def write_hold(self, *, hold_until_ns: int, now_ns: int, high_active: int) -> None:
        HOLD.pack_into(self._map, HOLD_OFFSET, hold_until_ns, now_ns, high_active)

    def read_schedule(self) -> tuple[int, tuple[Part, ...]]:
        """(frame_us, parts) as the library would read them."""
        _seq, n, frame_us, _ = SCHEDULE.unpack_from(self._map, SEQ_OFFSET)
        parts = []
        for i in range(min(n, MAX_SLOTS)):
            slot, start, end, free_pct = SLOT.unpack_from(self._map, SLOTS_OFFSET + i * SLOT.size)
            parts.append(Part(slot, start, end, free_pct))
        return frame_us, tuple(parts)

    def hold_until_ns(self) -> int:
        value: int = HOLD.unpack_from(self._map, HOLD_OFFSET)[0]
        return value
