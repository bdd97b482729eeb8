"""Reading a claim's accounting region, the file the interception library keeps in the claim directory.

The layout and its decoding are dra_driver/libtessera/region_layout.py (a test reads regions the C library
wrote). The file is writable by the claim's containers, so nothing here trusts it: it must be a regular file
of exactly the right size before it is opened at all (`open_plain_file`: a device node or FIFO a tenant made
with mknod is never opened, so no driver's open runs), and it is read with pread (a mapping would crash the
daemon with SIGBUS if a tenant truncated it).
"""

from __future__ import annotations

import fcntl
import os
import struct
from pathlib import Path

from dra_driver.io.files import open_plain_file
from dra_driver.libtessera.region_layout import (
    PROC,
    PROCS_OFFSET,
    SIZE,
    SLOT_LOCK_BASE,
    Region,
    RegionProcess,
    RegionUnreadableError,
    live_processes,
    process_slots,
    region,
)
from dra_driver.vocabulary.errors import StorageError

F_OFD_GETLK = 36
FLOCK = struct.Struct("hhqqi4x")  # struct flock on 64-bit Linux: type whence start len pid


def _open(path: Path) -> int:
    try:
        return open_plain_file(path, size=SIZE)
    except FileNotFoundError as e:
        raise RegionUnreadableError(f"{path}: absent") from e
    except StorageError as e:
        raise RegionUnreadableError(f"{path}: not a regular file of {SIZE} bytes ({e})") from e


def _read(fd: int, offset: int, size: int, path: Path) -> bytes:
    data = os.pread(fd, size, offset)
    if len(data) != size:
        raise RegionUnreadableError(f"{path}: truncated while read")
    return data


def _alive(fd: int, slot: int) -> bool:
    """Whether the process of a slot still holds its liveness lock (when unsure: alive)."""
    try:
        got = fcntl.fcntl(
            fd, F_OFD_GETLK, FLOCK.pack(fcntl.F_WRLCK, os.SEEK_SET, SLOT_LOCK_BASE + slot, 1, 0)
        )
    except OSError:
        return True
    return bool(FLOCK.unpack(got)[0] != fcntl.F_UNLCK)


def read_region(path: Path, *, processes: bool = True) -> Region:
    """The region's GPU entries with the bytes of the claim's live processes (and those processes, unless
    `processes` is false: then used_bytes is 0, for readers that want only the launch counters); raises
    RegionUnreadableError."""
    fd = _open(path)
    try:
        head = _read(fd, 0, PROCS_OFFSET, path)
        try:
            high = process_slots(head)
        except RegionUnreadableError as e:
            raise RegionUnreadableError(f"{path}: {e}") from e
        live: tuple[RegionProcess, ...] = ()
        if processes and high:
            body = _read(fd, PROCS_OFFSET, PROC.size * high, path)
            live = live_processes(body, lambda slot: _alive(fd, slot))
        return region(head, live)
    finally:
        os.close(fd)
