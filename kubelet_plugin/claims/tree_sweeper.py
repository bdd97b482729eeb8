"""The tree sweeper: removes trees that tenants could fill, in the background, a bounded pass at a time.

A claim directory is writable from its containers, so a tenant can leave a million files in it. Removing them
inside a kubelet call would make that call (or, with a bound per call, whichever call comes next, from any
tenant) pay for them: 4.8 s for another tenant's prepare beside a 1M-file tree. So a call renames the tree
aside (cheap, atomic) and hands it here. One daemon thread removes the trees with the link-safe
`dra_driver.io.safe_tree.remove_tree`, PASS_ENTRIES entries per pass with a PAUSE between passes, taking
turns between trees, so that the disk and the interpreter stay available to the calls. Nothing here raises
into a caller; a tree that cannot be removed is logged and left for the next start-up (which sweeps every temp
name).
"""

from __future__ import annotations

import collections
import threading
from pathlib import Path

import structlog

from dra_driver.io.safe_tree import TreeLimitError, remove_tree

log = structlog.get_logger(__name__)

PASS_ENTRIES = 2_000  # per pass: ~10 ms of unlinks
PAUSE_S = 0.005  # between passes: a call waiting for the interpreter gets it at once


class TreeSweeper:
    def __init__(self, *, pass_entries: int = PASS_ENTRIES, pause_s: float = PAUSE_S) -> None:
        self._pass_entries = pass_entries
        self._pause_s = pause_s
        self._queue: collections.deque[Path] = collections.deque()
        self._busy = False
        self._changed = threading.Condition()
        self._thread: threading.Thread | None = None
        self._stopping = False

    def add(self, path: Path) -> None:
        """Remove `path` (a tree already renamed aside) in the background."""
        with self._changed:
            if path not in self._queue:
                self._queue.append(path)
            if self._thread is None and not self._stopping:
                self._thread = threading.Thread(target=self._run, name="tree-sweeper", daemon=True)
                self._thread.start()
            self._changed.notify_all()

    def pending(self) -> tuple[Path, ...]:
        with self._changed:
            return tuple(self._queue)

    def wait_idle(self, timeout: float | None = None) -> bool:
        """Whether every tree handed over so far is gone (or given up) within `timeout`."""
        with self._changed:
            return self._changed.wait_for(lambda: not self._queue and not self._busy, timeout)

    def stop(self) -> None:
        with self._changed:
            self._stopping = True
            self._changed.notify_all()
            thread = self._thread
        if thread is not None:
            thread.join()

    def _run(self) -> None:
        while True:
            with self._changed:
                self._changed.wait_for(lambda: self._queue or self._stopping)
                if self._stopping:
                    return
                path = self._queue.popleft()
                self._busy = True
            again = self._one_pass(path)
            with self._changed:
                self._busy = False
                if again and path not in self._queue:
                    self._queue.append(path)  # at the back: trees take turns
                self._changed.notify_all()
            if again:
                with self._changed:
                    self._changed.wait_for(lambda: self._stopping, self._pause_s)

    def _one_pass(self, path: Path) -> bool:
        """One bounded pass over `path`; whether it needs another."""
        try:
            remove_tree(path, max_entries=self._pass_entries)
        except TreeLimitError:
            return True
        except Exception as e:  # never out of this thread: start-up sweeps what is left
            log.error("tree not removed; start-up sweeps it", path=str(path), error=str(e))
        return False
