"""Usage in claim status: the numbers from two region reads, and the rate limit (once per interval at most,
only when a percentage moved by more than 5 points)."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dra_driver.core.families import vgpu
from dra_driver.libtessera.region_layout import Region, RegionGpu, RegionUnreadableError
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.claims.api import claim_from_dict
from kubelet_plugin.claims.prepared_claims import ClaimDevice, PreparedClaim
from kubelet_plugin.observability.claim_pods import ClaimPods
from kubelet_plugin.observability.usage_status import Sample, Usage, UsageStatusLoop, moved, usage_between

GPU = GpuUUID("GPU-1")
GiB = 1 << 30
S = 1_000_000_000


def test_usage_between_two_reads() -> None:
    u = usage_between(Sample(0, 0, 0), Sample(30 * S, 15 * S, 60 * S), used_bytes=GiB // 4, limit_bytes=GiB)
    assert (u.memory_percent, u.sm_percent, u.throttled_percent, u.window_s) == (25.0, 50.0, 25.0, 60.0)
    assert u.data() == {
        "memoryUsed": "256Mi",
        "memoryUsedPercent": 25,
        "smTimeUsedPercent": 50,
        "throttledPercent": 25,
        "windowSeconds": 60,
    }
    # clamped: several processes' kernels can add up past the wall time
    assert (
        usage_between(Sample(0, 0, 0), Sample(90 * S, 0, 60 * S), used_bytes=0, limit_bytes=0).sm_percent
        == 100
    )


def test_a_write_is_due_first_and_then_only_past_five_points() -> None:
    base = Usage(GiB, 50.0, 20.0, 10.0, 60)
    assert moved(None, base)
    assert not moved(base, Usage(GiB, 54.9, 24.0, 6.0, 60))
    assert moved(base, Usage(GiB, 50.0, 25.1, 10.0, 60))


class Writer:
    def __init__(self) -> None:
        self.writes: list[tuple[str, Mapping[str, Mapping[str, object]]]] = []

    def write(self, *, namespace: str, name: str, uid: str, usage: Mapping[str, Mapping[str, object]]) -> Any:
        self.writes.append((name, usage))
        reserved = [{"resource": "pods", "name": "pod-a", "uid": "p1"}]
        return claim_from_dict({"metadata": {"name": name, "uid": uid}, "status": {"reservedFor": reserved}})


class Gpu:
    """A region whose counters the test moves."""

    def __init__(self) -> None:
        self.used, self.gpu_ns, self.throttled_ns, self.burst_ns = 0, 0, 0, 0
        self.readable = True

    def read(self, path: Path) -> Region:
        if not self.readable:
            raise RegionUnreadableError(str(path))
        g = RegionGpu(GPU, self.used, GiB, 50, 1, 0, 0, self.gpu_ns, self.throttled_ns, 0, 0, self.burst_ns)
        return Region(gpus=(g,), processes=())


def claim(name: str) -> PreparedClaim:
    d = ClaimDevice("gpu-1-vgpu", vgpu.NAME, 1, GPU, GiB, 0.5, metered=True, gpu_memory_bytes=80 * GiB)
    return PreparedClaim(ClaimUID(f"uid-{name}"), "ns", name, (d,), Path(f"/claims/{name}/region"))


def test_the_loop_writes_when_usage_moved_and_forgets_claims_that_left() -> None:
    gpu, writer, now, pods = Gpu(), Writer(), [0], ClaimPods()
    claims = [claim("c1"), PreparedClaim(ClaimUID("whole"), "ns", "whole", (), None)]
    loop = UsageStatusLoop(
        claims=lambda: claims, writer=writer, interval=60, read=gpu.read, clock=lambda: now[0], pods=pods
    )
    assert loop.tick() == 0  # a first read is only a baseline
    now[0] += 60 * S
    gpu.used, gpu.gpu_ns, gpu.throttled_ns = GiB // 2, 30 * S, 6 * S
    assert loop.tick() == 1
    assert writer.writes[-1] == (
        "c1",
        {
            "gpu-1-vgpu": {
                "memoryUsed": "512Mi",
                "memoryUsedPercent": 50,
                "smTimeUsedPercent": 50,
                "throttledPercent": 10,
                "windowSeconds": 60,
            }
        },
    )
    assert pods.pods(ClaimUID("uid-c1")) == "pod-a"  # the claim read for the write named its pod
    now[0] += 60 * S
    gpu.gpu_ns += 32 * S  # 53 %: within 5 points of the last write
    gpu.throttled_ns += 6 * S
    assert loop.tick() == 0
    now[0] += 60 * S
    gpu.gpu_ns += 6 * S  # 10 %: moved
    assert loop.tick() == 1 and len(writer.writes) == 2
    gpu.readable = False
    now[0] += 60 * S
    assert loop.tick() == 0  # an unreadable region is skipped, not an error
    claims.clear()
    assert loop.tick() == 0


def test_nothing_is_written_for_a_steady_claim() -> None:
    gpu, writer, now = Gpu(), Writer(), [0]
    loop = UsageStatusLoop(
        claims=lambda: [claim("steady")], writer=writer, read=gpu.read, clock=lambda: now[0]
    )
    for _ in range(10):
        now[0] += 60 * S
        gpu.gpu_ns += 12 * S
        loop.tick()
    assert len(writer.writes) == 1  # ten rounds, one write: the API write rate of a steady claim is ~0


def test_forged_region_numbers_reach_the_status_clipped_to_the_gpu() -> None:
    """Issue #20, attack 5: a forged region showed `memoryUsed: 70368744177664Mi`."""
    gpu, writer, now = Gpu(), Writer(), [0]
    loop = UsageStatusLoop(
        claims=lambda: [claim("c1")], writer=writer, interval=60, read=gpu.read, clock=lambda: now[0]
    )
    loop.tick()
    now[0] += 60 * S
    gpu.used, gpu.gpu_ns, gpu.throttled_ns = 1 << 62, 1 << 62, 1 << 62
    assert loop.tick() == 1
    usage = writer.writes[-1][1]["gpu-1-vgpu"]
    assert usage["memoryUsed"] == f"{80 * 1024}Mi" and usage["memoryUsedPercent"] == 100
    assert usage["smTimeUsedPercent"] == 100 and usage["throttledPercent"] == 100


def test_a_claim_that_bursts_shows_the_time_above_its_guarantee() -> None:
    gpu, writer, now = Gpu(), Writer(), [0]
    loop = UsageStatusLoop(claims=lambda: [claim("b")], writer=writer, read=gpu.read, clock=lambda: now[0])
    loop.tick()
    now[0] += 60 * S
    gpu.gpu_ns, gpu.burst_ns = 54 * S, 24 * S  # 90 % of the GPU with a 50 % guarantee: 40 points above it
    assert loop.tick() == 1
    usage = writer.writes[-1][1]["gpu-1-vgpu"]
    assert (usage["smTimeUsedPercent"], usage["burstPercent"], usage["burstSeconds"]) == (90, 40, 24.0)
    now[0] += 60 * S
    gpu.gpu_ns += 30 * S  # back to its share: the burst fell by 40 points, so the status moves
    assert loop.tick() == 1
    assert writer.writes[-1][1]["gpu-1-vgpu"]["burstPercent"] == 0


class OversubscribedGpu(Gpu):
    """A region of a claim that opted into memory oversubscription: its "+resident" entry counts what the
    device holds for it."""

    def __init__(self) -> None:
        super().__init__()
        self.held = 0

    def read(self, path: Path) -> Region:
        (g,) = super().read(path).gpus
        held = RegionGpu(f"{GPU}+resident", self.held, GiB // 4, 0, 1, 0, 0, 0, 0, 0, 0, entry=1)
        return Region(gpus=(g, held), processes=())


def test_an_oversubscribed_claim_shows_its_held_and_managed_memory_and_a_shift_between_them_is_written() -> (
    None
):
    gpu, writer, now = OversubscribedGpu(), Writer(), [0]
    loop = UsageStatusLoop(claims=lambda: [claim("o")], writer=writer, read=gpu.read, clock=lambda: now[0])
    loop.tick()
    now[0] += 60 * S
    gpu.used, gpu.held = 3 * GiB // 4, GiB // 4  # of its 1 GiB limit: 256Mi on the device, 512Mi managed
    assert loop.tick() == 1
    usage = writer.writes[-1][1]["gpu-1-vgpu"]
    assert (usage["memoryUsed"], usage["memoryHeld"], usage["memoryManaged"]) == ("768Mi", "256Mi", "512Mi")
    now[0] += 60 * S
    gpu.held = GiB // 8  # the same bytes, more of them managed: the memory used did not move, the split did
    assert loop.tick() == 1
    usage = writer.writes[-1][1]["gpu-1-vgpu"]
    assert (usage["memoryUsedPercent"], usage["memoryHeld"], usage["memoryManaged"]) == (75, "128Mi", "640Mi")
    now[0] += 60 * S
    gpu.held = 1 << 62  # forged: never more than the claim's memory used
    assert loop.tick() == 1
    assert writer.writes[-1][1]["gpu-1-vgpu"]["memoryManaged"] == "0Mi"


def test_a_claim_that_did_not_opt_in_shows_no_held_or_managed_memory() -> None:
    u = usage_between(Sample(0, 0, 0), Sample(0, 0, 60 * S), used_bytes=GiB, limit_bytes=GiB)
    assert "memoryHeld" not in u.data() and "memoryManaged" not in u.data() and u.managed_bytes == 0
