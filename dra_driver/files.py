"""Durable file writes shared by every on-disk format Tessera keeps: temp → fsync → rename → fsync(dir).

A failed write leaves nothing behind: the temp file is removed, and the target is either the old content or
the new, never a mix.
"""

from __future__ import annotations

import os
import secrets
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
