"""Where a test or demo node keeps its MPS control daemons: below its root when the sockets fit there."""

from __future__ import annotations

import os
from pathlib import Path

from kubelet_plugin.host_parts.mps.control import LONGEST_SOCKET, SOCKET_PATH_MAX
from tests.support.doubles.fake_mps import mps_dir_for

UUID = "GPU-7e55e7a0-1234-4567-89ab-cdef00000001"


def socket_bytes(mps_dir: Path) -> int:
    return len(os.fsencode(mps_dir / UUID / "pipe" / LONGEST_SOCKET))


def test_a_short_root_keeps_its_own_directory() -> None:
    root = Path("/tmp/te-sim-abc")
    assert mps_dir_for(root) == root / "var/lib/tessera/mps"
    assert socket_bytes(mps_dir_for(root)) <= SOCKET_PATH_MAX


def test_a_deep_root_gets_a_short_directory_of_its_own() -> None:
    deep = Path("/home/someone/src/github.com/example/tessera/.state/demo/nodes/h100x8")
    other = deep.parent / "mixed-a100-l4"
    assert socket_bytes(deep / "var/lib/tessera/mps") > SOCKET_PATH_MAX
    assert socket_bytes(mps_dir_for(deep)) <= SOCKET_PATH_MAX
    assert mps_dir_for(deep) == mps_dir_for(deep)  # `make demo-down` finds it again from the root
    assert mps_dir_for(deep) != mps_dir_for(other)
