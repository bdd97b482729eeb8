"""The NVML backend's reading of a GPU's PCIe link (dra_driver/backends/nvml_pcie.py) through pynvml over the
fake libnvidia-ml, whose link carries what the fake libcuda's page moves put on it (interceptor/fake/
nvml/pcie.c, the FAKE_GPU_MEM file): a claim whose managed memory pages keeps its GPU's link busy, the other
GPU's link stays idle, and a GPU whose NVML reads no throughput is an InventoryError (no daemon failure)."""

from __future__ import annotations

import statistics
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.backends.base import pcie_source
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.core.paging import LinkTraffic
from dra_driver.vocabulary.errors import InventoryError
from dra_driver.vocabulary.names import GpuUUID
from tests.support.doubles.fake_nvml import backend_on_fake
from tests.support.doubles.interceptor_programs import FAKE_GPU0, FAKE_GPU1, TOVERSUB, claim_dir, env, start
from tests.support.node_metrics import NODE_FILE

MiB = 1 << 20
LIMIT, RESIDENT, CHUNK = 1280 * MiB, 256 * MiB, 256 * MiB  # 1 GiB of it managed, on a 1 GiB GPU


@pytest.fixture
def backend(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[NvmlBackend]:
    """NVML over the fake, two GPUs with the fake libcuda's UUIDs, reading the memory file the test's
    processes share."""
    monkeypatch.setenv("FAKE_GPU_MEM", str(tmp_path / "mem"))
    with backend_on_fake(NODE_FILE, tmp_path / "fake-nvml") as b:
        yield b


def paging(tmp_path: Path, passes: int) -> subprocess.Popen[str]:
    """A claim of 1.25 GiB, 256 MiB of it on the device, reading all of its memory `passes` times on a
    1 GiB GPU paging at 30 GB/s (the link: PCIe 4 x16, 31.5 GB/s); returns once its pages moved once."""
    claim = claim_dir(
        tmp_path, "pager", f"gpu {FAKE_GPU0} memory {LIMIT} cores 0 priority 1 resident {RESIDENT}", version=3
    )
    ready, done = tmp_path / "ready", tmp_path / "done"
    e = env(
        claim,
        tmp_path / "gpu",
        FAKE_GPU_MEM=str(tmp_path / "mem"),
        FAKE_GPU_MEM_MB="1024",
        FAKE_PAGE_MBPS="30000",
    )
    p = start(
        TOVERSUB, "work", str(LIMIT), str(RESIDENT), str(CHUNK), str(passes), str(ready), str(done), env=e
    )
    for _ in range(3000):
        if ready.exists() or p.poll() is not None:
            break
        time.sleep(0.01)
    assert ready.exists(), p.communicate()[0] if p.poll() is not None else "not ready in 30 s"
    return p


def stop(p: subprocess.Popen[str], tmp_path: Path) -> str:
    (tmp_path / "done").touch()
    try:
        out, _ = p.communicate(timeout=60)
    except subprocess.TimeoutExpired:
        p.kill()
        out, _ = p.communicate()
    return out


def test_an_idle_link_carries_nothing_and_names_its_generation_and_width(backend: NvmlBackend) -> None:
    assert pcie_source(backend) is backend
    for gpu in (FAKE_GPU0, FAKE_GPU1):
        assert backend.pcie_traffic(gpu=GpuUUID(gpu)) == LinkTraffic(
            tx_bytes_per_s=0, rx_bytes_per_s=0, generation=4, width=16
        )


def test_a_claim_that_pages_keeps_its_gpus_link_busy_and_not_the_other_gpus(
    backend: NvmlBackend, tmp_path: Path
) -> None:
    p = paging(tmp_path, passes=40)  # about 3 s of paging
    try:
        readings: dict[str, list[float]] = {FAKE_GPU0: [], FAKE_GPU1: []}
        traffic: list[LinkTraffic] = []
        for _ in range(25):
            for gpu, busy in readings.items():
                t = backend.pcie_traffic(gpu=GpuUUID(gpu))
                assert t.busy is not None
                busy.append(t.busy)
                if gpu == FAKE_GPU0:
                    traffic.append(t)
            time.sleep(0.02)
        alive = p.poll() is None
    finally:
        out = stop(p, tmp_path)
    assert alive, out  # still paging when the last reading was taken
    # pages come in (rx) and go out to make room (tx): both directions carry them
    assert statistics.mean(r.rx_bytes_per_s for r in traffic) > 0, traffic
    assert statistics.mean(r.tx_bytes_per_s for r in traffic) > 0, traffic
    assert statistics.mean(readings[FAKE_GPU0]) > 0.5, (readings, out)
    assert readings[FAKE_GPU1] == [0.0] * 25


def test_a_gpu_whose_nvml_reads_no_throughput_is_an_inventory_error(
    backend: NvmlBackend, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setenv("FAKE_PCIE_GEN", "0")  # as a vGPU guest's NVML answers
    with pytest.raises(InventoryError, match=r"PCIe throughput of GPU .*Not Supported"):
        backend.pcie_traffic(gpu=GpuUUID(FAKE_GPU0))
