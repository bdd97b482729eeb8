"""Loading and saving the checkpoint file: atomic, fsync'd, verified on read."""

from __future__ import annotations

import time
from pathlib import Path

import structlog

from dra_driver.errors import StorageError
from dra_driver.files import atomic_write
from kubelet_plugin.checkpoint import Checkpoint, decode, encode

BOOT_ID_FILE = Path("/proc/sys/kernel/random/boot_id")
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

        A corrupt file raises StorageError: prepare must not guess which MIG instances are its own.
        """
        try:
            data = self._path.read_bytes()
        except FileNotFoundError:
            return Checkpoint(boot_id=boot_id)
        except OSError as e:
            raise StorageError(f"reading checkpoint {self._path}: {e.strerror or e}") from e
        return decode(data, source=f"checkpoint {self._path}")

    def save(self, checkpoint: Checkpoint) -> None:
        atomic_write(self._path, encode(checkpoint), mode=0o600)

    def set_aside(self) -> Path:
        """Move a corrupt checkpoint out of the way (kept for a human to inspect) and start afresh."""
        aside = self._path.with_name(f"{self._path.name}.corrupt-{int(time.time())}")
        try:
            self._path.replace(aside)
        except OSError as e:
            raise StorageError(f"moving corrupt checkpoint {self._path} aside: {e.strerror or e}") from e
        log.error("checkpoint corrupt; moved aside", path=str(aside))
        return aside
