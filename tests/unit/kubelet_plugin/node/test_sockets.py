"""Socket paths, stale-socket removal and the plugin lock, on real files and sockets."""

from __future__ import annotations

import fcntl
import os
import shutil
import socket
import subprocess
import sys
import tempfile
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.vocabulary.errors import ConfigError
from kubelet_plugin.node.sockets import (
    PluginLock,
    check_socket_path,
    clear_stale_socket,
    record_bound,
    remove_socket,
)


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def bind(path: Path, *, listen: bool) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(os.fspath(path))
    if listen:
        s.listen()
    return s


def test_a_dead_socket_is_removed(root: Path) -> None:
    path = root / "sub" / "dra.sock"
    path.parent.mkdir()
    bind(path, listen=False).close()  # a crashed process leaves its socket file behind
    assert path.exists()
    clear_stale_socket(path)
    assert not path.exists()


def test_a_served_socket_is_refused(root: Path) -> None:
    path = root / "dra.sock"
    with bind(path, listen=True):
        with pytest.raises(ConfigError, match="another process is serving"):
            clear_stale_socket(path)
        assert path.exists()


def test_a_file_in_the_way_is_refused(root: Path) -> None:
    path = root / "dra.sock"
    path.write_text("not a socket")
    with pytest.raises(ConfigError, match="not a socket"):
        clear_stale_socket(path)
    assert path.read_text() == "not a socket"


def test_socket_paths_must_be_absolute_and_short() -> None:
    with pytest.raises(ConfigError, match="absolute"):
        check_socket_path(Path("relative.sock"))
    with pytest.raises(ConfigError, match="over the unix limit"):
        check_socket_path(Path("/" + "x" * 120))
    check_socket_path(Path("/var/lib/kubelet/plugins_registry/gpu.tessera.dev-reg.sock"))


def test_remove_socket_leaves_a_successors_socket(root: Path) -> None:
    path = root / "dra.sock"
    with bind(path, listen=True):
        ours = record_bound(path)
    path.rename(root / "old.sock")  # keeps the inode alive, so the successor's differs
    with bind(path, listen=True):  # a new instance bound the same name
        assert remove_socket(ours) is False
        assert path.exists()
        assert remove_socket(record_bound(path)) is True
        assert not path.exists()
    assert remove_socket(ours) is False


def test_the_lock_excludes_another_process(root: Path) -> None:
    lock_file = root / "plugin.lock"
    holder = subprocess.Popen(
        [
            sys.executable,
            "-c",
            "import fcntl, os, sys, time\n"
            f"fd = os.open({str(lock_file)!r}, os.O_RDWR | os.O_CREAT)\n"
            "fcntl.flock(fd, fcntl.LOCK_EX)\n"
            "print('held', flush=True)\n"
            "sys.stdin.readline()\n",
        ],
        stdin=subprocess.PIPE,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert holder.stdout is not None and holder.stdin is not None
    assert holder.stdout.readline().strip() == "held"
    acquired = threading.Event()

    def take() -> None:
        with PluginLock(lock_file).held():
            acquired.set()

    t = threading.Thread(target=take)
    t.start()
    assert not acquired.wait(0.3)
    holder.stdin.write("\n")
    holder.stdin.flush()
    holder.wait(5)
    assert acquired.wait(5)
    t.join()


def test_the_lock_excludes_threads_and_is_released(root: Path) -> None:
    lock = PluginLock(root / "plugin.lock")
    inside = 0
    most = 0
    guard = threading.Lock()

    def work() -> None:
        nonlocal inside, most
        with lock.held():
            with guard:
                inside += 1
                most = max(most, inside)
            time.sleep(0.01)
            with guard:
                inside -= 1

    threads = [threading.Thread(target=work) for _ in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert most == 1
    fd = os.open(lock.path, os.O_RDWR)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)  # free again
    finally:
        os.close(fd)
