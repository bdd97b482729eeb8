from __future__ import annotations

from dra_driver.libtessera.region_layout import MAX_PROCS, RegionGpu
from kubelet_plugin.library_files.usage_bounds import MIN_CALL_NS, UsageBounds, node_uptime_ns

GiB = 1 << 30
S = 1_000_000_000


def test_forged_numbers_are_clipped_to_what_is_physically_possible() -> None:
    bounds = UsageBounds(gpu_memory_bytes=80 * GiB, uptime_ns=3600 * S)
    forged = RegionGpu(
        "GPU-1", 2**66, 2**66, 100, 0, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, 2**64 - 1, -5
    )
    got = bounds.gpu(forged)
    assert got.used_bytes == got.limit_bytes == 80 * GiB
    assert got.launches == got.oom_refusals == 3600 * S // MIN_CALL_NS * MAX_PROCS
    assert got.gpu_ns == got.throttled_ns == 3600 * S * MAX_PROCS
    assert got.held_ns == 0
    assert (got.uuid, got.cores, got.active_ns) == (
        "GPU-1",
        100,
        2**64 - 1,
    )  # no bound on what nobody reports


def test_honest_numbers_pass_unchanged() -> None:
    bounds = UsageBounds(gpu_memory_bytes=80 * GiB, uptime_ns=node_uptime_ns())
    honest = RegionGpu("GPU-1", 3 * GiB, 4 * GiB, 30, 1, 40, 0, 80_000_000, 5_000_000, 1, 0)
    assert bounds.gpu(honest) == honest
