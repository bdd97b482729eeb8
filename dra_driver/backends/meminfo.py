"""The host's memory, as the kernel tells it in /proc/meminfo's `MemTotal` (what backs the host-backed memory
of memoryOversubscription, docs/gpu-sharing.md "Oversubscription"): read bounded, parsed strictly, never
trusted."""

from __future__ import annotations

import re
from pathlib import Path

from dra_driver.io.files import read_bounded
from dra_driver.vocabulary.errors import StorageError

MEMINFO_MAX_BYTES = 64 << 10  # the kernel's is about 1.5 KiB
_MEM_TOTAL = re.compile(r"^MemTotal:[ \t]+([0-9]{1,15})[ \t]+kB[ \t]*$", re.MULTILINE)


def parse_mem_total(text: str) -> int | None:
    """MemTotal in bytes, or None where the text has no single well-formed `MemTotal: <n> kB` line."""
    found = _MEM_TOTAL.findall(text)
    if len(found) != 1 or int(found[0]) == 0:
        return None
    return int(found[0]) * 1024


def host_memory(path: Path) -> int | None:
    """MemTotal of the meminfo file at `path` (the backend's /proc root), or None where it cannot be read or
    says nothing usable: memoryOversubscription above 1 is then refused, never guessed."""
    try:
        data = read_bounded(path, max_bytes=MEMINFO_MAX_BYTES)
    except (FileNotFoundError, StorageError):
        return None
    return parse_mem_total(data.decode("ascii", errors="replace"))
