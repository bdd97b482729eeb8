"""Loading and saving the checkpoint file: atomic (durable when asked), verified on read, kept aside when
unreadable; and which save of it is on disk now (`Stamp`), the one test every instance on the node makes
before it acts on the checkpoint it holds (docs/architecture.md, "Two instances on one node")."""

from __future__ import annotations

import os
import stat
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.io.files import atomic_write, fsync_dir, read_bounded
from dra_driver.vocabulary.errors import CheckpointError, StorageError
from kubelet_plugin import metrics
from kubelet_plugin.node.file_modes import CHECKPOINT_MODE
from kubelet_plugin.record.checkpoint import HEAD_BYTES, Checkpoint, checksum_at_head, decode, encode

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
MAX_CHECKPOINT_BYTES = 64 << 20  # ~100k claims; a larger file is not one Tessera wrote
log = structlog.get_logger(__name__)


def read_boot_id(path: Path = BOOT_ID_FILE) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise StorageError(f"reading the node boot id from {path}: {e.strerror or e}") from e


@dataclass(frozen=True, slots=True)
class Stamp:
    """Which save of the checkpoint is on disk. Every save renames a new file in, so the file's identity
    changes with each; the checksum at its head names the content too, so an inode number the file system
    reused within one tick of its clock, at the same size, cannot pass for the file it replaced."""

    device: int
    inode: int
    mtime_ns: int
    size: int
    checksum: str | None  # None: the file does not start as a checkpoint does (decode will say why)


ABSENT = Stamp(0, 0, 0, -1, None)  # no checkpoint saved yet


def checkpoint_stamp(path: Path) -> Stamp | None:
    """The stamp of the checkpoint at `path` now: one open, fstat and read of its head (microseconds).
    None when it cannot be told (not a regular file, unreadable): treat as changed."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_CLOEXEC)
    except FileNotFoundError:
        return ABSENT
    except OSError:
        return None
    try:
        st = os.fstat(fd)
        if not stat.S_ISREG(st.st_mode):
            return None
        head = os.pread(fd, HEAD_BYTES, 0)
    except OSError:
        return None
    finally:
        os.close(fd)
    return Stamp(st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, checksum_at_head(head))


class CheckpointStore:
    def __init__(self, *, path: Path) -> None:
        self._path = path

    @property
    def path(self) -> Path:
        return self._path

    def load(self, *, boot_id: str) -> Checkpoint:
        """The saved checkpoint, or an empty one for `boot_id` when there is none yet.

        An unreadable file raises CheckpointError (UnsupportedVersionError when a newer Tessera wrote it):
        prepare must not guess which MIG instances are its own.
        """
        try:
            data = read_bounded(self._path, max_bytes=MAX_CHECKPOINT_BYTES)
        except FileNotFoundError:
            return Checkpoint(boot_id=boot_id)
        except StorageError as e:
            raise CheckpointError(f"checkpoint: {e}") from e
        return decode(data, source=f"checkpoint {self._path}")

    def stamp(self) -> Stamp | None:
        """Which save is on disk now (`checkpoint_stamp`)."""
        return checkpoint_stamp(self._path)

    def load_stamped(self, *, boot_id: str) -> tuple[Checkpoint, Stamp | None]:
        """`load`, with the stamp taken just before it: a save in between leaves a stamp older than what was
        read, which only makes the next test see a change, never miss one."""
        stamp = self.stamp()
        return self.load(boot_id=boot_id), stamp

    def save(self, checkpoint: Checkpoint, *, durable: bool = True) -> Stamp | None:
        """The saved file's stamp (None: it cannot be told now); CheckpointError when it cannot save."""
        data = encode(checkpoint)
        try:
            atomic_write(self._path, data, mode=CHECKPOINT_MODE, durable=durable)
        except Exception as e:
            metrics.CHECKPOINT_ERRORS.inc()
            if isinstance(e, StorageError):
                raise CheckpointError(str(e)) from e
            raise
        metrics.CHECKPOINT_WRITES.inc()
        try:  # what `checkpoint_stamp` would read, without reading back what was just written
            st = os.stat(self._path, follow_symlinks=False)
        except OSError:
            return None
        return Stamp(st.st_dev, st.st_ino, st.st_mtime_ns, st.st_size, checksum_at_head(data[:HEAD_BYTES]))

    def set_aside(self) -> Path:
        """Keep an unreadable checkpoint for a human, under a timestamped name next to it.

        A regular file is linked there and stays in place until a new checkpoint replaces it, so a crash
        meanwhile never leaves the node without one (no checkpoint means "nothing prepared"); anything else
        (a directory) is renamed.
        """
        stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime())
        for n in range(100):
            aside = self._path.with_name(f"{self._path.name}.unreadable-{stamp}" + (f"-{n}" if n else ""))
            if os.path.lexists(aside):
                continue
            try:
                try:
                    os.link(self._path, aside, follow_symlinks=False)
                except OSError:
                    self._path.rename(aside)
                fsync_dir(self._path.parent)
            except OSError as e:
                raise StorageError(
                    f"cannot keep the unreadable checkpoint {self._path} aside ({e.strerror or e}); "
                    "nothing was changed on the node"
                ) from e
            log.error("unreadable checkpoint kept aside", path=str(aside))
            return aside
        raise StorageError(f"cannot keep the unreadable checkpoint {self._path} aside: too many copies exist")
