"""The node's view of one GPU, written in place: the file the interception library of every vgpu claim on it
maps read-only. Its layout and encoding are dra_driver/libtessera/view_layout.py.

The daemon creates the file once and then only writes into it in place: containers keep it mapped, so it is
never replaced. A file of another layout (an older daemon's version 1) is formatted again; a library that
mapped it as version 1 before an upgrade finds no part in a free entry and falls back to its token bucket at
its cores. Only the daemon can write it (0644, in a directory containers mount read-only), so no claim can
hold another back.
"""

from __future__ import annotations

import mmap
import os
from pathlib import Path

from dra_driver.libtessera.view_layout import (
    FILE_SIZE,
    HOLD,
    HOLD_OFFSET,
    SCHEDULE,
    SEQ_OFFSET,
    SLOTS_OFFSET,
    VIEW_SIZE,
    Part,
    blank,
    is_current,
    schedule,
    schedule_head,
    slot_entries,
)
from dra_driver.vocabulary.errors import StorageError

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
        if not is_current(self._map[:SLOTS_OFFSET]):
            self._map[:] = blank()

    def close(self) -> None:
        self._map.close()

    def _put(self, offset: int, data: bytes) -> None:
        self._map[offset : offset + len(data)] = data

    def write_schedule(self, parts: tuple[Part, ...], *, frame_us: int) -> None:
        """Publish the parts under the sequence lock: readers see the old schedule or the new, never a mix."""
        seq = SCHEDULE.unpack_from(self._map, SEQ_OFFSET)[0] | 1  # odd: being written
        self._put(SEQ_OFFSET, schedule_head(seq, (), frame_us=frame_us))
        self._put(SLOTS_OFFSET, slot_entries(parts))
        self._put(SEQ_OFFSET, schedule_head(seq, parts, frame_us=frame_us))
        self._put(SEQ_OFFSET, schedule_head(seq + 1, parts, frame_us=frame_us))

    def write_hold(self, *, hold_until_ns: int, now_ns: int, high_active: int) -> None:
        self._put(HOLD_OFFSET, HOLD.pack(hold_until_ns, now_ns, high_active))

    def read_schedule(self) -> tuple[int, tuple[Part, ...]]:
        """(frame_us, parts) as the library would read them."""
        return schedule(self._map[:VIEW_SIZE])

    def hold_until_ns(self) -> int:
        value: int = HOLD.unpack_from(self._map, HOLD_OFFSET)[0]
        return value
