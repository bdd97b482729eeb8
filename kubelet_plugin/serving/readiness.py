"""When a plugin instance is ready to take claims: the kubelet registered it and its pool is published.

The DaemonSet's readinessProbe (`tessera plugin probe --ready`) checks the file this writes, so a rolling
update removes the old pod only once the new one can serve: registered by the kubelet's plugin watcher and
with its ResourceSlices on the API server. The file is per pod (two instances overlap during an update) and
goes when the instance stops or the kubelet withdraws the registration.
"""

from __future__ import annotations

import contextlib
import threading
from pathlib import Path

import structlog

from dra_driver.io.files import atomic_write

log = structlog.get_logger(__name__)


class Readiness:
    def __init__(self, path: Path, *, needs_publish: bool = True) -> None:
        self._path = path
        self._registered = False
        self._published = not needs_publish
        self._ready = False
        self._lock = threading.Lock()

    def registration(self, registered: bool) -> None:
        with self._lock:
            self._registered = registered
            self._update()

    def published(self) -> None:
        with self._lock:
            self._published = True
            self._update()

    def clear(self) -> None:
        with self._lock:
            self._registered = False
            self._update()

    def _update(self) -> None:
        ready = self._registered and self._published
        if ready == self._ready:
            return
        self._ready = ready
        if ready:
            atomic_write(self._path, b"ready\n", mode=0o644, durable=False)  # lost with a crash: fine
            log.info("ready", file=str(self._path))
        else:
            with contextlib.suppress(FileNotFoundError):
                self._path.unlink()
            log.info("not ready", file=str(self._path))


def is_ready(path: Path) -> bool:
    return path.is_file()
