"""File writes shared by every on-disk format Tessera keeps, and the reads that go with them.

Every write is atomic: temp → rename, so a reader (or a restart after a crash of this process) sees the old
content or the new, never a mix, and a failed write leaves nothing behind. A *durable* write also fsyncs the
file before and the directory after the rename, so it survives the machine losing power; that costs a few
milliseconds and is asked for only where a power loss could otherwise leave the node wrong (docs/
architecture.md, "Durability"). `fsync_count` counts them for the benchmarks. Modes are set explicitly,
whatever the process umask.

Every read of a file someone else can write (a claim's region and limits, CDI specs, the checkpoint, MPS
files) goes through `open_plain_file`: it refuses anything but a regular file *before* opening it for real.
An open with O_RDONLY | O_NONBLOCK already runs a device driver's open (a watchdog armed, a tape rewound) and
would block on a FIFO without O_NONBLOCK; an O_PATH open does neither, so the file is first taken by
O_PATH | O_NOFOLLOW, examined with fstat, and only then opened for reading through /proc/self/fd: the same
inode, so nothing put at the path in between is ever opened.
"""

from __future__ import annotations

import os
import secrets
import stat
import threading
from collections.abc import Callable
from pathlib import Path

from dra_driver.vocabulary.errors import StorageError

TEMP_MARK = ".tmp-"
# Test-only hook run after part of the data is written (raise OSError to simulate a full disk).
WriteFault = Callable[[], None]


_fsyncs = 0
_fsyncs_lock = threading.Lock()


def fsync(fd: int) -> None:
    global _fsyncs  # noqa: PLW0603 - a process-wide count, like the kernel's
    with _fsyncs_lock:
        _fsyncs += 1
    os.fsync(fd)


def fsync_count() -> int:
    """fsync calls made by this process so far through this module (a benchmark reads the difference)."""
    return _fsyncs


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(4)}")


def is_temp(name: str) -> bool:
    return name.startswith(".") and TEMP_MARK in name


def atomic_write(
    path: Path, data: bytes, *, mode: int = 0o644, durable: bool = True, fault: WriteFault | None = None
) -> None:
    """Replace `path` with `data` (durably: fsync'd before and after the rename); raises StorageError and
    leaves no temp file on failure."""
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
            if durable:
                fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        if durable:
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


class NotPlainFileError(StorageError):
    """The path names something other than a regular file (or a regular file of another size): refused
    unopened."""


_KINDS = (
    (stat.S_ISLNK, "a symbolic link (never followed)"),
    (stat.S_ISDIR, "a directory"),
    (stat.S_ISCHR, "a character device"),
    (stat.S_ISBLK, "a block device"),
    (stat.S_ISFIFO, "a FIFO"),
    (stat.S_ISSOCK, "a socket"),
)


def _kind(mode: int) -> str:
    return next((what for test, what in _KINDS if test(mode)), "not a regular file")


def open_plain_file(path: Path, *, size: int | None = None) -> int:
    """A read-only descriptor of the regular file at `path` (of exactly `size` bytes when given), which the
    caller closes. Nothing but a regular file is ever opened for reading (see above): a link, directory,
    device, FIFO or socket is refused after an O_PATH open, which runs no driver and never blocks.

    FileNotFoundError when absent; NotPlainFileError when it is something else or has another size;
    StorageError when it cannot be opened.
    """
    try:
        probe = os.open(path, os.O_PATH | os.O_NOFOLLOW | os.O_CLOEXEC)
    except FileNotFoundError:
        raise
    except OSError as e:
        raise StorageError(f"reading {path}: {e.strerror or e}") from e
    try:
        st = os.fstat(probe)
        if not stat.S_ISREG(st.st_mode):
            what = _kind(st.st_mode)
            raise NotPlainFileError(f"reading {path}: it is {what}, not a regular file; not opened")
        if size is not None and st.st_size != size:
            raise NotPlainFileError(f"reading {path}: {st.st_size} bytes, not the {size} expected")
        # the inode just examined, whatever the path names by now
        return os.open(f"/proc/self/fd/{probe}", os.O_RDONLY | os.O_CLOEXEC)
    except NotPlainFileError:
        raise
    except OSError as e:
        raise StorageError(f"reading {path}: {e.strerror or e}") from e
    finally:
        os.close(probe)


def read_bounded(path: Path, *, max_bytes: int) -> bytes:
    """The content of the regular file `path` (`open_plain_file`): never a link followed, a FIFO waited on
    or a device opened.

    FileNotFoundError when absent; StorageError when it is not a regular file, is larger than `max_bytes`
    or cannot be read.
    """
    fd = open_plain_file(path)
    try:
        st = os.fstat(fd)
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
