"""The daemon's region reader against regions the C library wrote (interceptor/src/region.h)."""

from __future__ import annotations

import os
import subprocess
import time
from pathlib import Path

import pytest

from dra_driver.libtessera.region_layout import SIZE, RegionUnreadableError
from kubelet_plugin.library_files.region import read_region
from tests.support.doubles.interceptor_programs import FAKE_GPU0, TCUDA, claim_dir, env, start

MiB = 1 << 20


def _hold(tmp_path: Path, claim: Path, nbytes: int) -> subprocess.Popen[str]:
    """A process of the claim holding nbytes until killed, once it holds them."""
    p = start(TCUDA, "hold", str(nbytes), env=env(claim, tmp_path / "gpu"))
    assert p.stdout is not None
    assert "ready" in p.stdout.readline()
    return p


def test_reads_what_the_library_wrote(tmp_path: Path) -> None:
    claim = claim_dir(tmp_path, "c", f"gpu {FAKE_GPU0} memory 1g cores 30 priority 1")
    p = _hold(tmp_path, claim, 300 * MiB)
    try:
        deadline = time.monotonic() + 10
        while not (claim / "region").exists() and time.monotonic() < deadline:
            time.sleep(0.05)
        region = read_region(claim / "region")
        gpu = region.gpu(FAKE_GPU0)
        assert gpu is not None
        assert (gpu.used_bytes, gpu.limit_bytes, gpu.cores, gpu.priority) == (300 * MiB, 1 << 30, 30, 1)
        assert [(proc.pid, proc.used_bytes[0]) for proc in region.processes] == [(p.pid, 300 * MiB)]
    finally:
        p.kill()
        p.wait()


@pytest.mark.parametrize(
    "damage",
    ["truncated", "symlink", "garbage", "fifo", "missing"],
)
def test_a_damaged_region_is_refused_not_trusted(tmp_path: Path, damage: str) -> None:
    path = tmp_path / "region"
    if damage == "truncated":
        path.write_bytes(bytes(SIZE // 2))
    elif damage == "symlink":
        (tmp_path / "elsewhere").write_bytes(bytes(SIZE))
        path.symlink_to(tmp_path / "elsewhere")
    elif damage == "garbage":
        path.write_bytes(os.urandom(SIZE))
    elif damage == "fifo":
        os.mkfifo(path)
    with pytest.raises(RegionUnreadableError):
        read_region(path)
