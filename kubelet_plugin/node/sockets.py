"""The daemon's unix sockets and the plugin-directory lock that serialises two instances.

During a rolling update the old and the new pod run at once, each with its own socket names; both may be
called by the kubelet, so every call that changes node state holds an exclusive flock on one file in the
plugin directory (shared by both pods through the host mount).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import os
import socket
import stat
import threading
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.vocabulary.errors import ConfigError, StorageError
from kubelet_plugin.node.file_modes import LOCK_MODE

# sockaddr_un.sun_path is 108 bytes including the terminating NUL.
MAX_SOCKET_PATH_BYTES = 107

log = structlog.get_logger(__name__)


class PluginLock:
    """An exclusive flock on `path`, taken per call; also excludes threads of this process.

    The file is opened per acquisition: flock belongs to the open file description, so two opens
    exclude each other even within one process, and a crashed holder releases it with its fd.
    """

    def __init__(self, path: Path) -> None:
        self._path = path
        self._threads = threading.Lock()

    @property
    def path(self) -> Path:
        return self._path

    @contextlib.contextmanager
    def held(self) -> Iterator[None]:
        with self._threads:
            try:
                fd = os.open(self._path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, LOCK_MODE)
            except OSError as e:
                raise StorageError(f"cannot open the plugin lock {self._path}: {e.strerror}") from e
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)
                yield
            finally:
                os.close(fd)  # releases the flock


@dataclass(frozen=True, slots=True)
class BoundSocket:
    """A socket path this process created; (inode, ctime) tells it apart from a successor's socket."""

    path: Path
    inode: int
    ctime_ns: int


def check_socket_path(path: Path) -> None:
    if not path.is_absolute():
        raise ConfigError(f"socket path {path} must be absolute: the kubelet dials it as given")
    if len(os.fsencode(path)) > MAX_SOCKET_PATH_BYTES:
        raise ConfigError(
            f"socket path {path} is {len(os.fsencode(path))} bytes, over the unix limit of "
            f"{MAX_SOCKET_PATH_BYTES}; use a shorter --root or pod UID"
        )


def is_served(path: Path) -> bool:
    """Whether a process accepts connections on `path` (a socket left by a crash does not)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        probe.settimeout(1.0)
        try:
            probe.connect(os.fspath(path))
        except OSError:
            return False
        return True


def clear_stale_socket(path: Path) -> None:
    """Make `path` free to bind: remove a dead socket left by a crash, refuse anything else."""
    check_socket_path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    try:
        st = path.lstat()
    except FileNotFoundError:
        return
    if not stat.S_ISSOCK(st.st_mode):
        raise ConfigError(f"{path} exists and is not a socket; remove it or choose another --root")
    if is_served(path):
        raise ConfigError(
            f"another process is serving {path}; run a second instance only with a distinct --pod-uid"
        )
    log.info("removing stale socket", path=str(path))
    with contextlib.suppress(FileNotFoundError):
        path.unlink()


def record_bound(path: Path) -> BoundSocket:
    try:
        st = path.stat()
    except OSError as e:
        raise StorageError(f"socket {path} was not created: {e.strerror}") from e
    return BoundSocket(path=path, inode=st.st_ino, ctime_ns=st.st_ctime_ns)


def remove_socket(bound: BoundSocket) -> bool:
    """Unlink our socket; leave it if a successor has since bound the same path."""
    try:
        st = bound.path.lstat()
    except FileNotFoundError:
        return False
    if (st.st_ino, st.st_ctime_ns) != (bound.inode, bound.ctime_ns) or not stat.S_ISSOCK(st.st_mode):
        log.info("socket was replaced by another instance; leaving it", path=str(bound.path))
        return False
    try:
        bound.path.unlink()
    except OSError as e:
        if e.errno != errno.ENOENT:
            log.warning("cannot remove socket", path=str(bound.path), error=e.strerror)
        return False
    return True
