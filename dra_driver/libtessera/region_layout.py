"""The accounting region's layout, and its bytes decoded into values (pure).

The region is the file the interception library keeps in a claim's shared directory: interceptor/src/region.h,
version 2 (one header, 16 GPU entries of 192 bytes, 1024 process slots of 144 bytes); the library writes it,
the node reads it (kubelet_plugin/library_files/region.py) for metrics, usage, the priority relay and the
burst arbiter. An entry's last two words were reserved (zero) before burst existed and are read as burst_ns: a
region of an older library reads as no burst. The claim's containers can write it, so decoding trusts nothing
but the layout: values are reported as found; callers clamp what they use.
"""

from __future__ import annotations

import struct
from collections.abc import Callable
from dataclasses import dataclass

from dra_driver.vocabulary import inventory

MAGIC = 0x4E4F494745525354  # "TSREGION"
VERSION = 2
MAX_GPUS = inventory.MAX_GPUS  # one entry per GPU a container can be given (TR_MAX_GPUS)
MAX_PROCS = 1024
HEADER = struct.Struct("<QIIQIIII8x")  # magic version header_size total_size max_gpus max_procs proc_high
GPUS_OFFSET = 112
GPU = struct.Struct("<64sQQqQIiQQQQQQQQQQQ")  # … held queued_until debt skip_until burst meter
PROCS_OFFSET = GPUS_OFFSET + GPU.size * MAX_GPUS  # the header and GPU entries: what every read takes first
PROC = struct.Struct("<iIQ16Q")
SIZE = PROCS_OFFSET + PROC.size * MAX_PROCS
SLOT_LOCK_BASE = 1 << 30  # byte SLOT_LOCK_BASE + i is slot i's liveness lock (held while its process lives)
_LIVE = 1  # a process slot's state while its process is attached
# The entry "<uuid>+resident" counts what the device holds for a claim that opted into memory oversubscription
# (region.h TR_HELD_SUFFIX); its "<uuid>" entry counts all of its memory, managed memory included.
HELD_SUFFIX = "+resident"


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

    def held(self, uuid: str) -> RegionGpu | None:
        """An oversubscribed claim's device-held entry for the GPU; None for a claim that did not opt in."""
        return self.gpu(uuid + HELD_SUFFIX)


def process_slots(head: bytes) -> int:
    """How many process slots the region has used (bounded by MAX_PROCS), from its first PROCS_OFFSET bytes;
    RegionUnreadableError for another magic, version or layout."""
    magic, version, header_size, total, max_gpus, max_procs, proc_high, _ = HEADER.unpack_from(head)
    if magic != MAGIC or version != VERSION:
        raise RegionUnreadableError(f"not a version {VERSION} region")
    if header_size != GPUS_OFFSET or total != SIZE or max_gpus != MAX_GPUS or max_procs != MAX_PROCS:
        raise RegionUnreadableError("layout mismatch")
    return int(min(proc_high, MAX_PROCS))


def live_processes(body: bytes, alive: Callable[[int], bool]) -> tuple[RegionProcess, ...]:
    """The attached processes among the slots in `body` (slots 0.. as read from PROCS_OFFSET) whose
    liveness lock `alive` says is held; each process's bytes are capped at 2^56."""
    found = []
    for i in range(len(body) // PROC.size):
        pid, state, _attach, *used = PROC.unpack_from(body, i * PROC.size)
        if state == _LIVE and alive(i):
            found.append(RegionProcess(pid, tuple(min(u, 1 << 56) for u in used), slot=i))
    return tuple(found)


def region(head: bytes, processes: tuple[RegionProcess, ...]) -> Region:
    """The region's GPU entries from its first PROCS_OFFSET bytes, each with the bytes `processes` hold."""
    gpus = []
    for i in range(MAX_GPUS):
        if not head[GPUS_OFFSET + i * GPU.size]:
            continue  # a free entry (empty UUID)
        f = GPU.unpack_from(head, GPUS_OFFSET + i * GPU.size)
        uuid = f[0].split(b"\0", 1)[0].decode("ascii", "replace")
        if uuid:
            held = sum(p.used_bytes[i] for p in processes)
            gpus.append(
                RegionGpu(uuid, held, f[2], f[5], f[6], f[7], f[8], f[9], f[10], f[11], f[12], f[16], entry=i)
            )
    return Region(tuple(gpus), processes)
