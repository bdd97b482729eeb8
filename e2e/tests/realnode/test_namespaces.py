"""The node's namespaces for real (root only): private mounts, shadowed kernel tunables, and nothing left
running once PID 1 goes, daemonised grandchildren included."""

from __future__ import annotations

import os
import time
from pathlib import Path

import pytest

from e2e.realnode.binaries import binaries_in, output_dir
from e2e.realnode.namespaces import NodeNamespaces

pytestmark = pytest.mark.skipif(os.geteuid() != 0, reason="namespaces and mounts need root")
PAUSE = binaries_in(output_dir()).pause


def _in_namespace(ns_inode: int) -> list[int]:
    found = []
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            try:
                if (entry / "ns" / "pid").stat().st_ino == ns_inode:
                    found.append(int(entry.name))
            except (FileNotFoundError, ProcessLookupError, PermissionError):
                continue
    return found


@pytest.mark.skipif(not PAUSE.exists(), reason="needs e2e/realnode/build.sh (bin/pause)")
def test_private_mounts_shadowed_tunables_and_a_clean_end(tmp_path: Path) -> None:
    (tmp_path / "sysctl").mkdir()
    namespaces = NodeNamespaces(root=tmp_path, init=PAUSE, tunables=["kernel/panic"])
    namespaces.start()
    try:
        assert namespaces.init_pid is not None
        ns_inode = Path(f"/proc/{namespaces.init_pid}/ns/pid").stat().st_ino
        host_panic = Path("/proc/sys/kernel/panic").read_text()
        script = (
            "echo 77 > /proc/sys/kernel/panic; touch /run/inside; "
            "setsid sleep 1000 < /dev/null > /dev/null 2>&1 & sleep 1000"
        )
        process = namespaces.spawn(
            name="shell", binary=Path("/bin/bash"), args=["-c", script], log_path=tmp_path / "shell.log"
        )
        time.sleep(0.5)
        assert process.alive()
        assert Path("/proc/sys/kernel/panic").read_text() == host_panic  # the machine's value is untouched
        assert (tmp_path / "sysctl" / "kernel.panic").read_text() == "77\n"
        assert not Path("/run/inside").exists()  # /run inside is the node's own tmpfs
        assert len(_in_namespace(ns_inode)) >= 4  # PID 1, the shell, its sleep and the daemonised sleep
    finally:
        namespaces.stop()
    deadline = time.monotonic() + 10
    while _in_namespace(ns_inode) and time.monotonic() < deadline:
        time.sleep(0.05)
    assert _in_namespace(ns_inode) == []
