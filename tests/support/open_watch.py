"""Counting real opens of a file, for tests that prove the daemon never opens what a tenant made.

An inotify watch for IN_OPEN (and IN_CLOSE) on the file itself (a device node, a FIFO, a regular file):
the kernel reports every open of that inode that yields a usable descriptor, by any path, from any process,
and none for an O_PATH open (which runs no device driver and never blocks on a FIFO). Adding the watch
opens nothing.
Linux only; raw syscalls through ctypes, as Python's os module has no inotify.
"""

from __future__ import annotations

import ctypes
import errno
import os
import stat
import struct
from pathlib import Path
from types import TracebackType

IN_OPEN = 0x00000020
IN_CLOSE = 0x00000008 | 0x00000010  # watched too: the kernel merges an event into an identical one queued
# just before it, so opens are counted exactly only with the closes between them
# what a root process in a container can make with mknod (CAP_MKNOD) where the daemon reads a file
SPECIAL_KINDS = ("character device", "fifo")
NULL_DEVICE = os.makedev(1, 3)  # /dev/null's numbers: harmless if a test did open it
_EVENT = struct.Struct("iIII")  # wd mask cookie len, then len bytes of name
_libc = ctypes.CDLL(None, use_errno=True)


class OpenWatch:
    """Real opens of the watched files since the watch began (`opens()`, per path)."""

    def __init__(self, *paths: Path) -> None:
        self._fd = _libc.inotify_init1(os.O_NONBLOCK | os.O_CLOEXEC)
        if self._fd < 0:
            raise OSError(ctypes.get_errno(), "inotify_init1")
        self._paths: dict[int, Path] = {}
        self._counts: dict[Path, int] = {}
        try:
            for path in paths:
                wd = _libc.inotify_add_watch(self._fd, os.fsencode(path), IN_OPEN | IN_CLOSE)
                if wd < 0:
                    raise OSError(ctypes.get_errno(), f"inotify_add_watch {path}")
                self._paths[wd] = path
                self._counts[path] = 0
        except OSError:
            os.close(self._fd)
            raise

    def opens(self) -> dict[Path, int]:
        while True:
            try:
                data = os.read(self._fd, 65536)
            except BlockingIOError:
                break
            except OSError as e:
                if e.errno == errno.EINTR:
                    continue
                raise
            at = 0
            while at < len(data):
                wd, mask, _cookie, length = _EVENT.unpack_from(data, at)
                at += _EVENT.size + length
                if mask & IN_OPEN and wd in self._paths:
                    self._counts[self._paths[wd]] += 1
        return dict(self._counts)

    def total(self) -> int:
        return sum(self.opens().values())

    def close(self) -> None:
        os.close(self._fd)

    def __enter__(self) -> OpenWatch:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()


def make_special(path: Path, kind: str) -> None:
    """A `kind` (SPECIAL_KINDS) at `path`, as a tenant's `mknod region c 1 3` or `mkfifo region` leaves it;
    a character device needs root (the caller skips without)."""
    if kind == "character device":
        os.mknod(path, stat.S_IFCHR | 0o666, NULL_DEVICE)
    elif kind == "fifo":
        os.mkfifo(path, 0o666)
    else:
        raise ValueError(f"kind must be one of {SPECIAL_KINDS}, got {kind!r}")


def can_make(kind: str) -> bool:
    return kind != "character device" or os.geteuid() == 0
