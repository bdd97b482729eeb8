from __future__ import annotations

import os
import socket
import stat
from pathlib import Path

from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.host_parts.mps.clients import MpsClientDirs

A, B = ClaimUID("uid-a"), ClaimUID("uid-b")


def bound(path: Path) -> socket.socket:
    s = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
    s.bind(str(path))
    s.listen(1)
    return s


def test_each_claim_gets_a_link_to_the_daemons_socket_and_nothing_else(tmp_path: Path) -> None:
    (tmp_path / "pipe").mkdir()
    daemon = bound(tmp_path / "pipe" / "control")
    (tmp_path / "pipe" / "control_privileged").touch()
    clients = MpsClientDirs(gpu_dir=tmp_path)
    try:
        d = clients.link(A)
        clients.link(B)
        assert os.listdir(d) == ["control"] and stat.S_IMODE(d.stat().st_mode) == 0o755
        assert (d / "control").stat().st_ino == (tmp_path / "pipe" / "control").stat().st_ino
        c = socket.socket(socket.AF_UNIX, socket.SOCK_SEQPACKET)
        c.connect(str(d / "control"))  # a client reaches the daemon through the link
        c.close()
        assert clients.uids() == [A, B] and clients.stale() == []
    finally:
        daemon.close()


def test_a_replaced_socket_makes_every_link_stale_until_linked_again(tmp_path: Path) -> None:
    (tmp_path / "pipe").mkdir()
    old = bound(tmp_path / "pipe" / "control")
    clients = MpsClientDirs(gpu_dir=tmp_path)
    clients.link(A)
    clients.link(B)
    (tmp_path / "pipe" / "control").unlink()
    new = bound(tmp_path / "pipe" / "control")
    try:
        assert clients.stale() == [A, B]
        assert clients.link_all() == [A, B] and clients.stale() == []
        assert clients.remove(A) and clients.uids() == [B] and not clients.remove(A)
    finally:
        old.close()
        new.close()
