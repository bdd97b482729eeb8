"""Which host processes hold a claim's region open, and in which container each runs: the kernel's answer
(/proc), never the region's, whose pids a tenant writes.

The interception library keeps its claim's region open for the process's life (its slot's liveness lock is
an OFD lock on that descriptor) and never maps it, so the region shows in /proc/<pid>/fd, not in maps. A
descriptor counts when its link names a region (the container's path, `/var/run/tessera/claims/<uid>/region`,
or the host's, `<claims dir>/<uid>/shared/region`) and the file it opens is the claim's region itself (same
device and inode: a tenant cannot pass a file of its own off as another claim's). For each such process:
the region slots whose liveness locks it holds (the `lock:` lines of that descriptor's fdinfo: the kernel
lists only the locks of that open file), its pid in its own pid namespace (the last `NSpid:` field of its
status) and its container's ID (from its cgroup path). A slot is thus tied to its container by the kernel even
when two containers' processes are both pid 1. Without hostPID the daemon sees only its own container's
processes and finds nothing.

Cost: a full scan lists /proc, each process's fd directory and reads a link per descriptor, bounded by
`max_processes` and `max_fds`; status, stat, cgroup and fdinfo are read (at most `max_file_bytes`) only for
processes that hold a region. That is tens of milliseconds on a busy node, so `ProcessTable` remembers each
slot's holder across scrapes and only checks it again (its descriptor still opens that region, its fdinfo
still shows the slot's lock, its start time is unchanged: three small reads); a full scan runs only when some
live slot has no holder that passes, at most once per scrape. `make bench-metrics` measures both.
"""

from __future__ import annotations

import os
import re
import threading
from collections.abc import Collection, Mapping
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.libtessera.names import REGION_FILE_NAME
from dra_driver.libtessera.region_layout import MAX_PROCS, SLOT_LOCK_BASE

log = structlog.get_logger(__name__)

PROC = Path("/proc")
MAX_PROCESSES = 16384  # /proc entries read per scan
MAX_FDS = 4096  # descriptors looked at per process
MAX_FILE_BYTES = 16384  # of a status or cgroup file

# a 64-hex container ID ending a cgroup path component: `cri-containerd-<id>.scope`, `crio-<id>.scope`,
# `docker-<id>.scope` (systemd driver) or `<id>` itself (cgroupfs driver, kubepods/.../pod<uid>/<id>)
_CONTAINER_ID = re.compile(r"(?:^|[-/])([0-9a-f]{64})(?:\.scope)?$")
_REGION_SUFFIX = "/" + REGION_FILE_NAME

FileKey = tuple[int, int]  # st_dev, st_ino


@dataclass(frozen=True, slots=True)
class ClaimProcess:
    host_pid: int
    pid: int  # in its own pid namespace: what the library writes into the region
    container: str  # full 64-hex container ID, "" when its cgroup names none
    slots: tuple[int, ...]  # region slots whose liveness lock it holds
    fd: str = ""  # a descriptor through which it holds the region
    start: str = ""  # its start time (clock ticks after boot): a reused pid is another process


def container_id(cgroup: str) -> str:
    """The container ID in a /proc/<pid>/cgroup text (v1: one line per hierarchy, v2: `0::<path>`); the
    unified line wins, then the first hierarchy naming one; "" when none does."""
    found = ""
    for line in cgroup.splitlines():
        parts = line.split(":", 2)
        if len(parts) != 3:
            continue
        path = parts[2].rstrip("/")
        m = _CONTAINER_ID.search(path)
        if m is None:
            continue
        if parts[0] == "0" and parts[1] == "":
            return m.group(1)
        found = found or m.group(1)
    return found


def namespaced_pid(status: str) -> int | None:
    """The pid in the process's own pid namespace: the last field of `NSpid:` (None when absent)."""
    for line in status.splitlines():
        if line.startswith("NSpid:"):
            fields = line[len("NSpid:") :].split()
            if fields and fields[-1].isdigit():
                return int(fields[-1])
            return None
    return None


def locked_slots(fdinfo: str) -> tuple[int, ...]:
    """The region slots locked through one descriptor: its fdinfo's `lock:` lines of one byte at
    SLOT_LOCK_BASE + slot (`lock:\t1: OFDLCK ADVISORY WRITE -1 fe:00:123 <start> <end>`)."""
    slots: list[int] = []
    for line in fdinfo.splitlines():
        if not line.startswith("lock:"):
            continue
        fields = line.split()
        if len(fields) < 3 or not fields[-1].isdigit() or fields[-2] != fields[-1]:
            continue
        slot = int(fields[-1]) - SLOT_LOCK_BASE
        if 0 <= slot < MAX_PROCS:
            slots.append(slot)
    return tuple(slots)


def start_time(stat: str) -> str:
    """Field 22 of /proc/<pid>/stat, counted after the command (which may hold anything); "" if absent."""
    fields = stat.rpartition(")")[2].split()
    return fields[19] if len(fields) > 19 else ""


def names_a_region(target: str) -> bool:
    """Whether a descriptor's link target is a file named like a region (a deleted one is not)."""
    return target.endswith(_REGION_SUFFIX)


def region_key(path: Path) -> FileKey | None:
    """The device and inode of a claim's region on the host, None when it cannot be examined."""
    try:
        st = os.stat(path, follow_symlinks=False)
    except OSError:
        return None
    return (st.st_dev, st.st_ino)


def _read(path: str, limit: int) -> str:
    fd = os.open(path, os.O_RDONLY | os.O_CLOEXEC)
    try:
        return os.read(fd, limit).decode("ascii", "replace")
    finally:
        os.close(fd)


def _held_regions(base: str, max_fds: int, max_bytes: int) -> dict[FileKey, tuple[str, tuple[int, ...]]]:
    """The regions a process (`base`: its /proc directory) holds open, each with the slots it locked
    through them. Plain strings and os calls: pathlib costs more than the syscalls here."""
    keys: dict[FileKey, tuple[str, tuple[int, ...]]] = {}
    try:
        with os.scandir(base + "/fd") as it:
            for n, entry in enumerate(it):
                if n >= max_fds:
                    break
                try:
                    if not os.readlink(entry.path).endswith(_REGION_SUFFIX):
                        continue
                    st = os.stat(entry.path)  # the open file itself, whatever its path says
                    slots = locked_slots(_read(f"{base}/fdinfo/{entry.name}", max_bytes))
                except OSError:
                    continue
                key = (st.st_dev, st.st_ino)
                fd, before = keys.get(key, (entry.name, ()))
                keys[key] = (fd, before + slots)
    except OSError:
        pass  # gone, or not ours to read
    return keys


def scan(
    *,
    proc: Path = PROC,
    max_processes: int = MAX_PROCESSES,
    max_fds: int = MAX_FDS,
    max_file_bytes: int = MAX_FILE_BYTES,
) -> Mapping[FileKey, tuple[ClaimProcess, ...]]:
    """Every process under `proc` that holds a region open, by the region's (device, inode)."""
    held: dict[FileKey, list[ClaimProcess]] = {}
    try:
        names = os.listdir(proc)
    except OSError as e:
        log.warning("proc_unreadable", proc=str(proc), error=str(e))
        return {}
    pids = [n for n in names if n.isdigit()]
    if len(pids) > max_processes:
        log.warning("proc_scan_capped", processes=len(pids), max_processes=max_processes)
        pids = pids[:max_processes]
    root = str(proc)
    for name in pids:
        base = f"{root}/{name}"
        keys = _held_regions(base, max_fds, max_file_bytes)
        if not keys:
            continue
        try:
            pid = namespaced_pid(_read(base + "/status", max_file_bytes))
            container = container_id(_read(base + "/cgroup", max_file_bytes))
            start = start_time(_read(base + "/stat", max_file_bytes))
        except OSError:
            continue  # exited meanwhile
        if pid is None:
            continue
        for key, (fd, slots) in keys.items():
            held.setdefault(key, []).append(ClaimProcess(int(name), pid, container, slots, fd, start))
    return {k: tuple(v) for k, v in held.items()}


def by_slot(processes: tuple[ClaimProcess, ...]) -> Mapping[int, ClaimProcess]:
    """Region slot → the process holding its liveness lock, for one region's holders."""
    return {slot: p for p in processes for slot in p.slots}


class ProcessTable:
    """Each region slot's holder, kept across scrapes and checked again before it is used (see above).
    `new_scrape` allows one more full scan; `holders` is safe from concurrent scrapes."""

    def __init__(
        self,
        *,
        proc: Path = PROC,
        max_processes: int = MAX_PROCESSES,
        max_fds: int = MAX_FDS,
        max_file_bytes: int = MAX_FILE_BYTES,
    ) -> None:
        self._proc = proc
        self._limits = (max_processes, max_fds, max_file_bytes)
        self._known: Mapping[FileKey, Mapping[int, ClaimProcess]] = {}
        self._scanned = False
        self._lock = threading.Lock()
        self.full_scans = 0

    def new_scrape(self) -> None:
        with self._lock:
            self._scanned = False

    def _still_holds(self, key: FileKey, slot: int, p: ClaimProcess) -> bool:
        base = f"{self._proc}/{p.host_pid}"
        try:
            st = os.stat(f"{base}/fd/{p.fd}")
            if (st.st_dev, st.st_ino) != key:
                return False
            if slot not in locked_slots(_read(f"{base}/fdinfo/{p.fd}", self._limits[2])):
                return False
            return start_time(_read(base + "/stat", self._limits[2])) == p.start
        except OSError:
            return False

    def holders(self, region: Path, live: Collection[int]) -> Mapping[int, ClaimProcess]:
        """Slot → the process holding its lock, for the region at `region` and its `live` slots."""
        key = region_key(region)
        if key is None or not live:
            return {}
        with self._lock:
            known = self._known.get(key, {})
            held = {s: known[s] for s in live if s in known and self._still_holds(key, s, known[s])}
            if len(held) == len(live) or self._scanned:
                return held  # a holder that fails its check is never shown, even after this scrape's scan
            found = scan(
                proc=self._proc,
                max_processes=self._limits[0],
                max_fds=self._limits[1],
                max_file_bytes=self._limits[2],
            )
            self._scanned = True
            self.full_scans += 1
            self._known = {k: by_slot(v) for k, v in found.items()}
            known = self._known.get(key, {})
            return {s: known[s] for s in live if s in known}
