"""Reading a file someone else can write: nothing but a regular file is ever opened for reading."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest

from dra_driver.io.files import NotPlainFileError, open_plain_file, read_bounded
from dra_driver.vocabulary.errors import StorageError
from tests.support.open_watch import SPECIAL_KINDS, OpenWatch, can_make, make_special


def test_a_regular_file_is_read(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(b"hello")
    fd = open_plain_file(path, size=5)
    try:
        assert os.read(fd, 16) == b"hello"
        assert os.fstat(fd).st_ino == path.stat().st_ino
    finally:
        os.close(fd)
    assert read_bounded(path, max_bytes=5) == b"hello"


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_a_device_node_or_fifo_is_refused_and_never_opened(tmp_path: Path, kind: str) -> None:
    if not can_make(kind):
        pytest.skip("mknod of a character device needs root")
    path = tmp_path / "region"
    make_special(path, kind)
    with OpenWatch(path) as watch:
        with pytest.raises(NotPlainFileError, match=f"it is a {kind.replace('fifo', 'FIFO')}, not a regular"):
            open_plain_file(path)
        with pytest.raises(StorageError, match="not a regular file"):
            read_bounded(path, max_bytes=1 << 16)
        assert watch.opens() == {path: 0}


def test_links_directories_and_sockets_are_refused(tmp_path: Path) -> None:
    target = tmp_path / "target"
    target.write_bytes(b"secret")
    (tmp_path / "link").symlink_to(target)
    (tmp_path / "dir").mkdir()
    with socket.socket(socket.AF_UNIX) as s:
        s.bind(str(tmp_path / "sock"))
        for name, what in (("link", "a symbolic link"), ("dir", "a directory"), ("sock", "a socket")):
            with pytest.raises(NotPlainFileError, match=f"it is {what}"):
                open_plain_file(tmp_path / name)


def test_another_size_is_refused_and_absence_is_its_own_error(tmp_path: Path) -> None:
    path = tmp_path / "f"
    path.write_bytes(bytes(10))
    with pytest.raises(NotPlainFileError, match="10 bytes, not the 11 expected"):
        open_plain_file(path, size=11)
    with pytest.raises(FileNotFoundError):
        open_plain_file(tmp_path / "absent")
    with pytest.raises(FileNotFoundError):
        read_bounded(tmp_path / "absent", max_bytes=1)
