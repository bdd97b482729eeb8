"""Which instance on the node leads: an exclusive flock in the plugin directory, taken without waiting and
kept while the instance runs.

During a rolling update two instances share the node. Loops that write node-wide files from what they watch
(the GPU views' burst arbiter and priority relay) must run in one of them only: two arbiters watching from
different moments would lay one view out two ways, and two relays would hold and release the same claims in
turn. The leader is whoever holds the lock; the others ask again whenever their loops look (one flock call)
and take over when the leader exits, since the kernel drops the lock with the last descriptor of its holder.
"""

from __future__ import annotations

import contextlib
import fcntl
import os
import threading
from pathlib import Path

import structlog

from kubelet_plugin.node.file_modes import LOCK_MODE

log = structlog.get_logger(__name__)


class LeaderLock:
    """Thread-safe; `close` gives the lead up (the daemon stops)."""

    def __init__(self, path: Path, *, what: str) -> None:
        self._path = path
        self._what = what  # what the leader runs, for the log
        self._fd: int | None = None
        self._leads = False
        self._told: str | None = None  # the last state logged, so a follower says so once
        self._mutex = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    def leads(self) -> bool:
        """Whether this instance leads now (taking the lead if nobody holds it)."""
        if self._leads:
            return True
        with self._mutex:
            if self._leads:
                return True
            try:
                if self._fd is None:
                    self._fd = os.open(
                        self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_MODE
                    )
                fcntl.flock(self._fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except BlockingIOError:
                self._tell("follows", "another instance runs them; this one takes over when it exits")
                return False
            except OSError as e:
                self._tell("cannot", f"cannot take the lock ({e.strerror or e}); asking again", warn=True)
                return False
            self._leads = True
            log.info(f"this instance runs {self._what}", lock=str(self._path))
            return True

    def _tell(self, state: str, why: str, *, warn: bool = False) -> None:
        if self._told != state:
            self._told = state
            (log.warning if warn else log.info)(f"{self._what}: {why}", lock=str(self._path))

    def close(self) -> None:
        with self._mutex:
            if self._fd is not None:
                with contextlib.suppress(OSError):
                    os.close(self._fd)  # releases the flock
            self._fd, self._leads = None, False
