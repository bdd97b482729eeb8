"""Reading a claim's accounting region, the file the interception library keeps in the claim directory.

The layout is interceptor/src/region.h, version 2 (one header, 16 GPU entries of 192 bytes, 1024 process
slots of 144 bytes); a test reads regions the C library wrote. An entry's last two words were reserved
(zero) before burst existed and are read as burst_ns: a region of an older library reads as no burst. The
file is writable by the claim's containers, so nothing here trusts it: it must be a regular file of exactly
the right size before it is opened at all (`open_plain_file`: a device node or FIFO a tenant made with mknod
is never opened, so no driver's open runs), and it is read with pread (a mapping would crash the daemon with
SIGBUS if a tenant truncated it). Values are reported as found; callers clamp what they use.
"""

from __future__ import annotations

import fcntl
import os
import struct
from dataclasses import dataclass
from pathlib import Path

from dra_driver.io.files import open_plain_file
from dra_driver.vocabulary import inventory
from dra_driver.vocabulary.errors import StorageError

MAGIC = 0x4E4F494745525354  # "TSREGION"
VERSION = 2
MAX_GPUS = inventory.MAX_GPUS  # one entry per GPU a container can be given
MAX_PROCS = 1024
HEADER = struct.Struct("<QIIQIIII8x")  # magic version header_size total_size max_gpus max_procs proc_high
GPUS_OFFSET = 112
GPU = struct.Struct("<64sQQqQIiQQQQQQQQQQQ")  # … held queued_until debt skip_until burst meter
PROCS_OFFSET = GPUS_OFFSET + GPU.size * MAX_GPUS
PROC = struct.Struct("<iIQ16Q")
SIZE = PROCS_OFFSET + PROC.size * MAX_PROCS
REGION_FILE_NAME = "region"
SLOT_LOCK_BASE = 1 << 30  # byte SLOT_LOCK_BASE + i is slot i's liveness lock (held while its process lives)
F_OFD_GETLK = 36
FLOCK = struct.Struct("hhqqi4x")  # struct flock on 64-bit Linux: type whence start len pid


class RegionUnreadableError(Exception):
    """The region cannot be read: absent, not a regular file, wrong size, magic or version."""


@dataclass(frozen=True, slots=True)
class RegionGpu:
    uuid: str
    used_bytes: int  # the sum of the claim's live processes' bytes (the library keeps no shared total)
    limit_bytes: int
    cores: int
    priority: int
    launches: int
    active_ns: int  # CLOCK_MONOTONIC of a high-priority claim's last launch
    gpu_ns: int
    throttled_ns: int
    oom_refusals: int
    held_ns: int
    burst_ns: int = 0  # GPU time charged above its guaranteed cores (a claim with a ceiling)
    entry: int = 0  # its index among the region's GPU entries (RegionProcess.used_bytes is indexed by it)


@dataclass(frozen=True, slots=True)
class RegionProcess:
    pid: int  # in the pid namespace of the container that wrote it
    used_bytes: tuple[int, ...]  # per GPU entry
    slot: int = 0  # its slot in the region: unique among the claim's live processes, whatever their pids


@dataclass(frozen=True, slots=True)
class Region:
    gpus: tuple[RegionGpu, ...]
    processes: tuple[RegionProcess, ...]

    def gpu(self, uuid: str) -> RegionGpu | None:
        return next((g for g in self.gpus if g.uuid.lower() == uuid.lower()), None)


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
        magic, version, header_size, total, max_gpus, max_procs, proc_high, _ = HEADER.unpack_from(head)
        if magic != MAGIC or version != VERSION:
            raise RegionUnreadableError(f"{path}: not a version {VERSION} region")
        if header_size != GPUS_OFFSET or total != SIZE or max_gpus != MAX_GPUS or max_procs != MAX_PROCS:
            raise RegionUnreadableError(f"{path}: layout mismatch")
        procs: list[RegionProcess] = []
        high = min(proc_high, MAX_PROCS)
        if processes and high:
            body = _read(fd, PROCS_OFFSET, PROC.size * high, path)
            for i in range(high):
                pid, state, _attach, *used = PROC.unpack_from(body, i * PROC.size)
                if state == 1 and _alive(fd, i):
                    procs.append(RegionProcess(pid, tuple(min(u, 1 << 56) for u in used), slot=i))
        gpus = []
        for i in range(MAX_GPUS):
            if not head[GPUS_OFFSET + i * GPU.size]:
                continue  # a free entry (empty UUID)
            f = GPU.unpack_from(head, GPUS_OFFSET + i * GPU.size)
            uuid = f[0].split(b"\0", 1)[0].decode("ascii", "replace")
            if uuid:
                held = sum(p.used_bytes[i] for p in procs)
                gpus.append(
                    RegionGpu(
                        uuid, held, f[2], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[16], entry=i
                    )
                )
        return Region(tuple(gpus), tuple(procs))
    finally:
        os.close(fd)
