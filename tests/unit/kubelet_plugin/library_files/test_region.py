"""The region reader on regions the C library wrote: a fake-driver program (interceptor/build/tests/tcuda)
runs under libtessera in a claim directory, then the reader's values are compared with what it did."""

from __future__ import annotations

import subprocess
from collections.abc import Iterator
from pathlib import Path

import pytest

from dra_driver.core.families import vgpu
from dra_driver.core.sm_schedule import SharingClaim
from dra_driver.libtessera.names import REGION_FILE_NAME
from dra_driver.libtessera.region_layout import SIZE, Region, RegionUnreadableError
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.claims.prepared_claims import ClaimDevice, PreparedClaim
from kubelet_plugin.host_parts.vgpu.arbiter import Arbiter, ArbitratedGpu
from kubelet_plugin.host_parts.vgpu.priority_relay import LaunchEvidence, RelayedGpu, relay_once
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.library_files.region import read_region
from kubelet_plugin.observability.usage_status import UsageStatusLoop
from tests.support.doubles.interceptor_programs import FAKE_GPU0, TCUDA, claim_dir, env, start
from tests.support.open_watch import SPECIAL_KINDS, OpenWatch, can_make, make_special

MiB = 1 << 20
GiB = 1 << 30


def _run(tmp_path: Path, claim: Path, *args: str) -> subprocess.Popen[str]:
    p = start(TCUDA, *args, env=env(claim, tmp_path / "gpu"))
    assert p.stdout is not None
    line = p.stdout.readline()
    assert "ready" in line, line + p.stdout.read()
    return p


@pytest.fixture
def processes() -> Iterator[list[subprocess.Popen[str]]]:
    running: list[subprocess.Popen[str]] = []
    yield running
    for p in running:
        p.kill()
        p.wait()


def test_memory_launches_gpu_time_throttling_and_refusals(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    claim = claim_dir(tmp_path, "c", f"gpu {FAKE_GPU0} memory {GiB} cores 30 priority 1")
    processes.append(_run(tmp_path, claim, "usage", str(300 * MiB), "40", "2000"))
    region = read_region(claim / "region")
    gpu = region.gpu(FAKE_GPU0)
    assert gpu is not None
    assert (gpu.used_bytes, gpu.limit_bytes, gpu.cores, gpu.priority) == (300 * MiB, GiB, 30, 1)
    assert (gpu.launches, gpu.oom_refusals) == (40, 1)
    # 40 kernels of 2 ms: the GPU time charged is their solo time (the last batch may not be settled yet)
    assert 36 * 2_000_000 <= gpu.gpu_ns <= 40 * 2_500_000
    # at 30 % of the SMs, 80 ms of work takes ~270 ms: most of it waiting for the limiter
    assert gpu.throttled_ns > 50_000_000
    assert [(p.pid, p.used_bytes[0]) for p in region.processes] == [(processes[0].pid, 300 * MiB)]


def test_bytes_are_those_of_live_processes_and_counters_outlive_them(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    claim = claim_dir(tmp_path, "c", f"gpu {FAKE_GPU0} memory {GiB} cores 50 priority 1")
    first = _run(tmp_path, claim, "usage", str(100 * MiB), "8", "1000")
    processes.append(_run(tmp_path, claim, "usage", str(200 * MiB), "8", "1000"))
    both = read_region(claim / "region").gpu(FAKE_GPU0)
    assert both is not None and both.used_bytes == 300 * MiB and both.oom_refusals == 2
    first.kill()
    first.wait()
    after: Region = read_region(claim / "region")
    gpu = after.gpu(FAKE_GPU0)
    assert gpu is not None and gpu.used_bytes == 200 * MiB  # a dead process's slot no longer counts
    assert [p.pid for p in after.processes] == [processes[0].pid]
    assert gpu.launches == 16 and gpu.oom_refusals == 2  # claim-wide counters stay


def test_without_processes_only_the_counters_are_read(
    tmp_path: Path, processes: list[subprocess.Popen[str]]
) -> None:
    claim = claim_dir(tmp_path, "c", f"gpu {FAKE_GPU0} memory {GiB} cores 30 priority 1")
    processes.append(_run(tmp_path, claim, "usage", str(64 * MiB), "4", "1000"))
    region = read_region(claim / "region", processes=False)
    gpu = region.gpu(FAKE_GPU0)
    assert gpu is not None and gpu.launches == 4 and gpu.used_bytes == 0 and region.processes == ()


class _NoWrites:
    def write(self, **_: object) -> tuple[str, ...]:
        raise AssertionError("nothing to write from an unreadable region")


@pytest.mark.parametrize("kind", SPECIAL_KINDS)
def test_a_region_a_tenant_made_a_device_node_or_fifo_is_never_opened(tmp_path: Path, kind: str) -> None:
    """Issue #34, defect 4: `mknod region c 1 3` in the claim's shared directory. Every reader of regions
    (the reader itself, the burst arbiter's and the priority relay's rounds, usage in claim status) finds it
    unreadable without opening it: no driver's open runs, no FIFO is waited on."""
    if not can_make(kind):
        pytest.skip("mknod of a character device needs root")
    normal, high = tmp_path / "normal", tmp_path / "high"
    for d in (normal, high):
        d.mkdir()
        make_special(d / REGION_FILE_NAME, kind)
    view = GpuView(tmp_path / "view")
    claims = (SharingClaim(1, 30), SharingClaim(2, 20, high_priority=True))
    arbitrated = ArbitratedGpu(FAKE_GPU0, view, claims, (normal, high))
    device = ClaimDevice("gpu-0-vgpu", vgpu.NAME, 0, GpuUUID(FAKE_GPU0), GiB, 0.3, metered=True)
    usage = UsageStatusLoop(
        claims=lambda: [PreparedClaim(ClaimUID("uid-n"), "ns", "n", (device,), normal / REGION_FILE_NAME)],
        writer=_NoWrites(),
    )
    arbiter, evidence = Arbiter(), LaunchEvidence()
    with OpenWatch(normal / REGION_FILE_NAME, high / REGION_FILE_NAME) as watch:
        for now in range(0, 200_000_000, 10_000_000):  # 20 rounds of each loop, past the arbiter's IDLE_NS
            with pytest.raises(RegionUnreadableError, match=f"not a regular file of {SIZE} bytes"):
                read_region(normal / REGION_FILE_NAME)
            arbiter.round([arbitrated], now_ns=now, commit=lambda _g, _p: True)
            relay_once([RelayedGpu(FAKE_GPU0, view, (high,))], evidence, now_ns=now)
            assert usage.tick() == 0
        assert watch.total() == 0, watch.opens()
    assert view.hold_until_ns() == 0  # no evidence from it: nobody held back
    view.close()
