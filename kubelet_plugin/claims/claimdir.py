"""Per-claim host directories for claims whose devices use the interception library. Modes and why:
`kubelet_plugin.node.file_modes`, docs/security.md.

    <claims root>/<uid>/            the daemon's, never mounted: no container can reach it by a name
        limits                      the limits file; mounted read-only (a file bind mount) over shared/limits
        shared/                     mounted read-write as the container's claim directory
            region                  the accounting region the claim's processes share (created empty here)
            limits                  an empty mount point (0444) the read-only limits mount covers

So the library finds `limits` and `region` in its claim directory as before, but a root process in the
container cannot write, replace or rename `limits` (a read-only mount point), and what the node reports or
decides comes from `<uid>/limits`, which only the daemon writes. The directory appears atomically (built under
a temp name, then renamed), so the library never sees it without its limits file. Nothing here is fsync'd:
after a power loss the claim's containers are gone and start-up reconciliation rewrites or removes the
directory (docs/architecture.md, "Durability"). A container can still fill `shared/` (a root process ignores
modes): removal therefore renames the directory aside (cheap, under the node lock) and hands the tree to the
background `TreeSweeper`, so no kubelet call ever pays for a tenant's files.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Iterator
from pathlib import Path

import structlog

from dra_driver.io.files import WriteFault, atomic_write, is_temp, temp_name
from dra_driver.io.safe_tree import is_plain_file, remove_tree
from dra_driver.libtessera.limits_file import LimitsFile
from dra_driver.libtessera.names import LIMITS_FILE_NAME, REGION_FILE_NAME, SHARED_DIR_NAME
from dra_driver.vocabulary.errors import ClaimDirectoryError, InvalidNameError, StorageError
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.tree_sweeper import TreeSweeper
from kubelet_plugin.library_files.limits import limits_bytes
from kubelet_plugin.node.file_modes import (
    CLAIM_DIR_MODE,
    CLAIMS_ROOT_MODE,
    LIMITS_MODE,
    MOUNT_POINT_MODE,
    REGION_MODE,
    SHARED_DIR_MODE,
    make_dir,
)

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
    def __init__(self, *, root: Path, sweeper: TreeSweeper | None = None) -> None:
        self._root = root
        self.sweeper = sweeper or TreeSweeper()

    def path(self, uid: ClaimUID) -> Path:
        return self._root / ClaimUID(uid)  # validated again: this is where a UID becomes a path

    def shared(self, uid: ClaimUID) -> Path:
        """The directory the claim's containers get read-write (the region)."""
        return self.path(uid) / SHARED_DIR_NAME

    def write(self, uid: ClaimUID, *, limits: LimitsFile, fault: WriteFault | None = None) -> Path:
        """Create the claim dir with its limits, shared dir and region, or rewrite the limits of an existing
        one (putting back what a tenant removed or replaced in its shared dir). ClaimDirectoryError when it
        cannot."""
        try:
            return self._write(self.path(uid), limits_bytes(limits), fault)
        except ClaimDirectoryError:
            raise
        except StorageError as e:  # a file in it (the limits file, a tenant's tree in the way)
            raise ClaimDirectoryError(str(e)) from e

    def _write(self, final: Path, data: bytes, fault: WriteFault | None) -> Path:
        if _is_dir(final):
            try:
                os.chmod(final, CLAIM_DIR_MODE)
                self._only_a_file(final / LIMITS_FILE_NAME)
                shared = final / SHARED_DIR_NAME
                if not _is_dir(shared):
                    if os.path.lexists(shared):
                        self._set_aside(shared)
                    os.mkdir(shared, SHARED_DIR_MODE)
                os.chmod(shared, SHARED_DIR_MODE)
                self._shared_files(shared)
            except OSError as e:
                raise ClaimDirectoryError(f"claim directory {final}: {e.strerror or e}") from e
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
            os.mkdir(staging / SHARED_DIR_NAME, SHARED_DIR_MODE)
            os.chmod(staging / SHARED_DIR_NAME, SHARED_DIR_MODE)
            self._shared_files(staging / SHARED_DIR_NAME)
            staging.rename(final)
        except (OSError, StorageError) as e:
            remove_tree(staging)
            if isinstance(e, StorageError):
                raise
            raise ClaimDirectoryError(f"creating claim directory {final}: {e.strerror or e}") from e
        return final

    def _shared_files(self, shared: Path) -> None:
        """The region and the limits mount point, each a regular file (anything else is set aside)."""
        if not self._only_a_file(shared / REGION_FILE_NAME):
            _create(shared / REGION_FILE_NAME, b"", mode=REGION_MODE)
        if not self._only_a_file(shared / LIMITS_FILE_NAME):
            _create(shared / LIMITS_FILE_NAME, b"", mode=MOUNT_POINT_MODE)

    def _only_a_file(self, path: Path) -> bool:
        """Whether a regular file is at `path`; anything else a tenant put there (a link, a directory tree)
        is set aside into the claims root and removed like a claim directory."""
        if is_plain_file(path):
            return True
        if os.path.lexists(path):
            self._set_aside(path)
        return False

    def _set_aside(self, path: Path) -> None:
        aside = temp_name(self._root / f"{path.parent.name}-{path.name}")
        os.rename(path, aside)
        self._discard(aside)

    def remove(self, uid: ClaimUID) -> bool:
        """Set the claim dir aside under a temp name (atomic, cheap); the sweeper removes it later."""
        final = self.path(uid)
        if not os.path.lexists(final):
            return False
        doomed = temp_name(final)
        try:
            final.rename(doomed)
        except FileNotFoundError:
            return False
        except OSError as e:
            raise ClaimDirectoryError(f"removing claim directory {final}: {e.strerror or e}") from e
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
        """Staging or set-aside dirs a killed process left behind, and temp files of our limits writes in
        each claim dir (or planted, under our names, in its shared dir)."""
        stale = [self._root / name for name in self._names() if is_temp(name)]
        ours = f".{LIMITS_FILE_NAME}"
        for uid in self.uids():
            for d in (self.path(uid), self.shared(uid)):
                try:
                    names = os.listdir(d)
                except OSError:
                    continue
                stale += [d / n for n in sorted(names) if is_temp(n) and n.startswith(ours)]
        for path in stale:
            self._discard(path)
        return stale

    def _names(self) -> list[str]:
        try:
            return sorted(os.listdir(self._root))
        except FileNotFoundError:
            return []

    def _discard(self, path: Path) -> None:
        self.sweeper.add(path)
