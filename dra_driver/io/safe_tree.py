"""Removing a directory tree that someone else may have filled: the one removal every cleanup path uses.

Claim directories are writable from inside containers, so what they hold is hostile input: trees
thousands of levels deep, hundreds of thousands of entries, symbolic links to anywhere, entries that change
while they are removed. `remove_tree` therefore

- never follows a symbolic link (directories are opened with O_NOFOLLOW relative to their parent's fd, and a
  link is unlinked, never entered), and never leaves the file system it started on;
- never recurses: a directory's subdirectories are moved up to the top of the tree being removed (a rename
  within it) and emptied one by one, so depth costs neither stack nor file descriptors (three at most);
- stops after `max_entries` removals (a directory costs two: moved up, then removed) with a TreeLimitError
  that says so, so one tree cannot keep the daemon busy for ever; what is left is still a tree under the
  same path, and a later call continues where this one stopped.
"""

from __future__ import annotations

import errno
import itertools
import os
import stat
from pathlib import Path

from dra_driver.vocabulary.errors import StorageError

MAX_ENTRIES = 250_000  # per call; ~4 s of unlinks on a slow disk
_DIR_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
_NOT_A_DIR = (errno.ENOTDIR, errno.ELOOP)
_HOIST_PREFIX = ".tessera-rm-"


class TreeLimitError(StorageError):
    """The tree has more entries than one call may remove; the rest stays for a later call."""


class _Budget:
    def __init__(self, path: Path, limit: int) -> None:
        self.path = path
        self.limit = limit
        self.used = 0

    def spend(self) -> None:
        self.used += 1
        if self.used > self.limit:
            raise TreeLimitError(
                f"{self.path}: stopped after {self.limit} entries; the rest is left in place and is "
                "removed by a later cleanup (the next pass of the sweeper, or start-up)"
            )


def remove_tree(path: Path, *, max_entries: int = MAX_ENTRIES) -> int:
    """Remove `path` (a directory tree, a file or a link; never what a link points to).

    Returns the number of entries removed (0: nothing was there). Raises TreeLimitError past
    `max_entries`, StorageError for anything else that stops it.
    """
    budget = _Budget(path, max_entries)
    try:
        # the parent is the host's own directory (it may be a link, e.g. /var/run/cdi): only what is
        # inside the tree is never followed
        parent = os.open(path.parent, os.O_RDONLY | os.O_DIRECTORY | os.O_CLOEXEC)
    except FileNotFoundError:
        return 0
    except OSError as e:
        raise StorageError(f"removing {path}: cannot open {path.parent}: {e.strerror or e}") from e
    try:
        _remove_at(parent, path.name, budget)
    except OSError as e:
        raise StorageError(f"removing {path}: {e.strerror or e} ({e.filename or 'an entry'})") from e
    finally:
        os.close(parent)
    return budget.used


def _open_dir(name: str, *, dir_fd: int, budget: _Budget) -> int | None:
    """The directory's fd; None when `name` is gone or is no directory (then it is unlinked, not followed)."""
    try:
        return os.open(name, _DIR_FLAGS, dir_fd=dir_fd)
    except FileNotFoundError:
        return None
    except OSError as e:
        if e.errno not in _NOT_A_DIR:
            raise
    _unlink(name, dir_fd=dir_fd, budget=budget)
    return None


def _unlink(name: str, *, dir_fd: int, budget: _Budget) -> None:
    budget.spend()
    try:
        os.unlink(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except IsADirectoryError:
        pass  # replaced by a directory since we looked: the next scan of its parent picks it up


def _rmdir(name: str, *, dir_fd: int, budget: _Budget) -> bool:
    """Remove the (emptied) directory; False when something was put in it meanwhile."""
    budget.spend()
    try:
        os.rmdir(name, dir_fd=dir_fd)
    except FileNotFoundError:
        pass
    except OSError as e:
        if e.errno != errno.ENOTEMPTY:
            raise
        return False
    return True


def _remove_at(parent: int, name: str, budget: _Budget) -> None:
    # a tree refilled while we worked is gone round again; the budget bounds how often
    while (top := _open_dir(name, dir_fd=parent, budget=budget)) is not None:
        try:
            device = os.fstat(top).st_dev
            hoisted = itertools.count()
            while True:
                _empty(top, top, hoisted, budget)
                pending = _names(top)
                if not pending:
                    break
                for sub in pending:
                    _drain(top, sub, device, hoisted, budget)
        finally:
            os.close(top)
        if _rmdir(name, dir_fd=parent, budget=budget):
            return


def _names(fd: int) -> list[str]:
    with os.scandir(fd) as entries:
        return [entry.name for entry in entries]


def _drain(top: int, name: str, device: int, hoisted: itertools.count[int], budget: _Budget) -> None:
    """Empty the directory `name` directly under `top` (its subdirectories move up to `top`), remove it.

    Refilled meanwhile, it stays under `top` and the caller's next round drains it again.
    """
    fd = _open_dir(name, dir_fd=top, budget=budget)
    if fd is None:
        return
    try:
        if os.fstat(fd).st_dev != device:
            raise StorageError(
                f"{budget.path}: {name} is another file system mounted inside; not entering it"
            )
        _empty(fd, top, hoisted, budget)
    finally:
        os.close(fd)
    _rmdir(name, dir_fd=top, budget=budget)


def _empty(fd: int, top: int, hoisted: itertools.count[int], budget: _Budget) -> None:
    """Unlink every non-directory in `fd`; move its subdirectories up to `top` (unless fd is top)."""
    with os.scandir(fd) as entries:
        for entry in entries:
            try:
                is_dir = entry.is_dir(follow_symlinks=False)
            except OSError:
                is_dir = False
            if not is_dir:
                _unlink(entry.name, dir_fd=fd, budget=budget)
            elif fd != top:
                _hoist(fd, entry.name, top, hoisted, budget)


def _hoist(fd: int, name: str, top: int, hoisted: itertools.count[int], budget: _Budget) -> None:
    while True:
        budget.spend()
        target = f"{_HOIST_PREFIX}{next(hoisted)}"
        try:
            os.rename(name, target, src_dir_fd=fd, dst_dir_fd=top)
            return
        except FileNotFoundError:
            return
        except OSError as e:
            # the name is taken by a non-empty directory or a file: try the next one
            if e.errno not in (errno.ENOTEMPTY, errno.EEXIST, errno.ENOTDIR, errno.EISDIR):
                raise


def is_plain_file(path: Path) -> bool:
    """Whether `path` itself (not what a link points to) is a regular file."""
    try:
        return stat.S_ISREG(path.lstat().st_mode)
    except FileNotFoundError:
        return False
