"""Per-claim host directories for claims whose devices use the interception library: the limits file the
library reads and the accounting region it shares. Modes and why: `kubelet_plugin.file_modes`,
docs/security.md.

The directory appears atomically (built under a temp name, then renamed), so the library never sees a
directory without its limits file. Nothing here is fsync'd: after a power loss the claim's containers are
gone and start-up reconciliation rewrites or removes the directory (docs/architecture.md, "Durability").
The daemon creates both files the library needs (`limits`, and `region` empty, which the library formats on
first use), so the directory itself needs no write access for the container's users. A container can still
fill it (a root process ignores modes): removal therefore renames the directory aside (cheap, under the node
lock) and removes the tree later, outside the lock, with the bounded, link-safe
`dra_driver.safe_tree.remove_tree` (`removals_deferred`).
"""

from __future__ import annotations

import contextlib
import os
import stat
import threading
from collections.abc import Iterator
from pathlib import Path

import structlog

from dra_driver.errors import InvalidNameError, StorageError
from dra_driver.files import WriteFault, atomic_write, is_temp, temp_name
from dra_driver.names import LIMITS_FILE_NAME, REGION_FILE_NAME, ClaimUID
from dra_driver.safe_tree import MAX_ENTRIES, is_plain_file, remove_tree
from kubelet_plugin.file_modes import CLAIM_DIR_MODE, CLAIMS_ROOT_MODE, LIMITS_MODE, REGION_MODE, make_dir

log = structlog.get_logger(__name__)


def _create(path: Path, data: bytes, *, mode: int, fault: WriteFault | None = None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, mode)
    try:
        os.fchmod(fd, mode)  # not narrowed by the umask: the claim's containers run as any uid
        view = memoryview(data)
        if fault is not None:
            fault()
        while view:
            view = view[os.write(fd, view) :]
    finally:
        os.close(fd)


def _is_dir(path: Path) -> bool:
    try:
        return stat.S_ISDIR(path.lstat().st_mode)
    except FileNotFoundError:
        return False


class ClaimDirs:
    def __init__(self, *, root: Path, max_entries: int = MAX_ENTRIES) -> None:
        self._root = root
        self._max_entries = max_entries
        self._local = threading.local()
        self._leftovers: list[Path] = []  # trees a removal stopped on at its bound; later removals go on
        self._leftovers_lock = threading.Lock()

    def path(self, uid: ClaimUID) -> Path:
        return self._root / ClaimUID(uid)  # validated again: this is where a UID becomes a path

    def write(self, uid: ClaimUID, *, limits: str, fault: WriteFault | None = None) -> Path:
        """Create the claim dir with its limits and region files, or rewrite the limits of an existing one."""
        final = self.path(uid)
        data = limits.encode()
        if _is_dir(final):
            try:
                os.chmod(final, CLAIM_DIR_MODE)
                self._only_a_file(final / LIMITS_FILE_NAME)
                if not self._only_a_file(final / REGION_FILE_NAME):
                    _create(final / REGION_FILE_NAME, b"", mode=REGION_MODE)
            except OSError as e:
                raise StorageError(f"claim directory {final}: {e.strerror or e}") from e
            atomic_write(final / LIMITS_FILE_NAME, data, mode=LIMITS_MODE, durable=False, fault=fault)
            return final
        if os.path.lexists(final):
            remove_tree(final)  # not a directory: nothing a container can have used
        staging = temp_name(final)
        try:
            make_dir(self._root, CLAIMS_ROOT_MODE)
            os.mkdir(staging, CLAIM_DIR_MODE)
            os.chmod(staging, CLAIM_DIR_MODE)
            # The staging dir is the atomic unit: its files need no temp names of their own.
            _create(staging / LIMITS_FILE_NAME, data, mode=LIMITS_MODE, fault=fault)
            _create(staging / REGION_FILE_NAME, b"", mode=REGION_MODE)
            staging.rename(final)
        except (OSError, StorageError) as e:
            remove_tree(staging)
            if isinstance(e, StorageError):
                raise
            raise StorageError(f"creating claim directory {final}: {e.strerror or e}") from e
        return final

    def _only_a_file(self, path: Path) -> bool:
        """Whether a regular file is at `path`; anything else a tenant put there (a link, a directory tree)
        is set aside into the claims root and removed like a claim directory."""
        if is_plain_file(path):
            return True
        if os.path.lexists(path):
            aside = temp_name(self._root / f"{path.parent.name}-{path.name}")
            os.rename(path, aside)
            self._discard(aside)
        return False

    def remove(self, uid: ClaimUID) -> bool:
        """Set the claim dir aside under a temp name (atomic, cheap), then remove it (removals_deferred)."""
        final = self.path(uid)
        if not os.path.lexists(final):
            return False
        doomed = temp_name(final)
        try:
            final.rename(doomed)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise StorageError(f"removing claim directory {final}: {e.strerror or e}") from e
        self._discard(doomed)
        return True

    def uids(self) -> Iterator[ClaimUID]:
        for name in self._names():
            if is_temp(name) or not _is_dir(self._root / name):
                continue
            try:
                yield ClaimUID(name)
            except InvalidNameError:
                log.warning("not a claim directory; left alone", path=str(self._root / name))

    def remove_stale_temps(self) -> list[Path]:
        """Staging or set-aside dirs a killed process (or a removal stopped at its bound) left behind."""
        stale = [self._root / name for name in self._names() if is_temp(name)]
        for path in stale:
            self._discard(path)
        return stale

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self._root))
        except FileNotFoundError:
            return []

    # ---- removal outside the lock -----------------------------------------------------------------

    @contextlib.contextmanager
    def removals_deferred(self) -> Iterator[None]:
        """Within the block, this thread's removals only set directories aside; they are removed on leaving.

        Enter it outside the node lock and take the lock inside: a tenant's 100k files then never hold it.
        """
        depth: int = getattr(self._local, "depth", 0)
        if depth == 0:
            self._local.queue = []
        self._local.depth = depth + 1
        try:
            yield
        finally:
            self._local.depth = depth
            if depth == 0:
                queue: list[Path] = self._local.queue
                self._local.queue = []
                self._remove_trees(queue)

    def _discard(self, path: Path) -> None:
        if getattr(self._local, "depth", 0):
            self._local.queue.append(path)
        else:
            self._remove_trees([path])

    def _remove_trees(self, paths: list[Path]) -> None:
        with self._leftovers_lock:
            todo = list(dict.fromkeys([*self._leftovers, *paths]))
            self._leftovers = []
        for i, path in enumerate(todo):
            try:
                remove_tree(path, max_entries=self._max_entries)
            except Exception as e:  # runs after the call's answers are settled: log, never raise
                # The claim is gone all the same. What is left is retried by the next removal or start-up;
                # stopping here keeps one call to one bound's worth of work past a too-large tree.
                log.error("claim directory not fully removed", path=str(path), error=str(e))
                with self._leftovers_lock:
                    self._leftovers.extend(todo[i:])
                return
