"""Durable file writes shared by every on-disk format Tessera keeps: temp → fsync → rename → fsync(dir),
and the bounded read that goes with them.

A failed write leaves nothing behind: the temp file is removed, and the target is either the old content or
the new, never a mix. Modes are set explicitly, whatever the process umask.
"""

from __future__ import annotations

import errno
import os
import secrets
import stat
from collections.abc import Callable
from pathlib import Path

from dra_driver.errors import StorageError

TEMP_MARK = ".tmp-"
# Test-only hook run after part of the data is written (raise OSError to simulate a full disk).
WriteFault = Callable[[], None]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(4)}")


def is_temp(name: str) -> bool:
    return name.startswith(".") and TEMP_MARK in name


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, fault: WriteFault | None = None) -> None:
    """Replace `path` with `data` durably; raises StorageError and leaves no temp file on failure."""
    tmp = temp_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            os.fchmod(fd, mode)  # the umask may have narrowed it, and a reader may need it as given
            half = len(data) // 2
            os.write(fd, data[:half])
            if fault is not None:
                fault()
            view = memoryview(data)[half:]
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"writing {path}: {e.strerror or e}") from e


def remove_durably(path: Path) -> bool:
    """Remove a file and persist the removal; False if it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise StorageError(f"removing {path}: {e.strerror or e}") from e
    fsync_dir(path.parent)
    return True


def read_bounded(path: Path, *, max_bytes: int) -> bytes:
    """The content of the regular file `path`, never following a link, never blocking on a FIFO or device.

    FileNotFoundError when absent; StorageError when it is not a regular file, is larger than `max_bytes`
    or cannot be read.
    """
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        why = "it is a symbolic link (never followed)" if e.errno == errno.ELOOP else e.strerror or str(e)
        raise StorageError(f"reading {path}: {why}") from e
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            raise StorageError(f"reading {path}: not a regular file")
        if st.st_size > max_bytes:
            raise StorageError(f"reading {path}: {st.st_size} bytes, more than the {max_bytes} allowed")
        chunks = []
        left = max_bytes + 1
        while left > 0:
            chunk = os.read(fd, min(left, 1 << 20))
            if not chunk:
                break
            chunks.append(chunk)
            left -= len(chunk)
        data = b"".join(chunks)
        if len(data) > max_bytes:
            raise StorageError(f"reading {path}: grew past the {max_bytes} bytes allowed while being read")
        return data
    except OSError as e:
        raise StorageError(f"reading {path}: {e.strerror or e}") from e
    finally:
        os.close(fd)
