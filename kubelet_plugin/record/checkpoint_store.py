"""Loading and saving the checkpoint file: atomic (durable when asked), verified on read, kept aside when
unreadable."""

from __future__ import annotations

import os
import time
from pathlib import Path

import structlog

from dra_driver.system.files import atomic_write, fsync_dir, read_bounded
from dra_driver.values.errors import CheckpointError, StorageError
from kubelet_plugin import metrics
from kubelet_plugin.node.file_modes import CHECKPOINT_MODE
from kubelet_plugin.record.checkpoint import Checkpoint, decode, encode

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
MAX_CHECKPOINT_BYTES = 64 << 20  # ~100k claims; a larger file is not one Tessera wrote
log = structlog.get_logger(__name__)


def read_boot_id(path: Path = BOOT_ID_FILE) -> str:
    try:
        return path.read_text().strip()
    except OSError as e:
        raise StorageError(f"reading the node boot id from {path}: {e.strerror or e}") from e


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

    def save(self, checkpoint: Checkpoint, *, durable: bool = True) -> None:
        """CheckpointError when it cannot."""
        try:
            atomic_write(self._path, encode(checkpoint), mode=CHECKPOINT_MODE, durable=durable)
        except Exception as e:
            metrics.CHECKPOINT_ERRORS.inc()
            if isinstance(e, StorageError):
                raise CheckpointError(str(e)) from e
            raise
        metrics.CHECKPOINT_WRITES.inc()

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
