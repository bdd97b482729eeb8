"""When a claim spends most of its time paging: the decision behind the `MostlyPaging` Warning Event (pure).

The interception library cannot see where the driver keeps a managed allocation's pages, nor when it moves
them (docs/gpu-sharing.md, "Oversubscription"), so no per-claim paging time exists on a real node. What a
real node does have is NVML's PCIe throughput per GPU (`nvmlDeviceGetPcieThroughput`: bytes each way over a
20 ms window) beside the link's bandwidth (its current generation and width). Pages the driver moves between
host and device memory cross that link, so a GPU whose link is busy most of the time, while claims on it
hold host-backed (managed) bytes, is a GPU whose opted-in claims are probably paging. The link's traffic is
the GPU's: any copy to or from the host counts too, and where several claims hold host-backed bytes on one
GPU nothing says which of them moves the pages (the event says so).

A sample's busy share is the bytes both ways against one direction's bandwidth, capped at 1: pages evicted
to make room and pages brought in both occupy the link, and a link that carries half its bandwidth each
way is as full as one that carries all of it one way. The window's share is the mean of its samples.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass

from dra_driver.vocabulary.names import ClaimUID, GpuUUID

# bytes a lane carries each way per second, per PCIe generation (after line coding: 8b/10b to gen 2,
# 128b/130b from gen 3, FLIT mode in gen 6)
LANE_BYTES_PER_S: Mapping[int, int] = {
    1: 250_000_000,
    2: 500_000_000,
    3: 985_000_000,
    4: 1_969_000_000,
    5: 3_938_000_000,
    6: 7_563_000_000,
}
MAX_LANES = 32
BUSY_SHARE = 0.5  # a window whose link was busy more than this: "most of its time"
WINDOW_S = 60.0
SAMPLE_S = 2.0  # NVML's window is 20 ms: one sample every SAMPLE_S seconds
REPEAT_S = 3600.0  # a claim warned is not warned again within this, even if the condition cleared
GIB, MIB = 1 << 30, 1 << 20


@dataclass(frozen=True, slots=True)
class LinkTraffic:
    """One NVML reading of a GPU's link: bytes per second each way (over NVML's 20 ms) and the link."""

    tx_bytes_per_s: int  # from the GPU (pages evicted to the host)
    rx_bytes_per_s: int  # to the GPU (pages migrated in, reads of host memory)
    generation: int
    width: int

    @property
    def bandwidth_bytes_per_s(self) -> int | None:
        """One direction's bandwidth; None for a generation or width NVML should not report."""
        lane = LANE_BYTES_PER_S.get(self.generation)
        if lane is None or not 0 < self.width <= MAX_LANES:
            return None
        return lane * self.width

    @property
    def busy(self) -> float | None:
        """The share of the link this reading kept busy, 0 to 1; None when the link is not known."""
        bandwidth = self.bandwidth_bytes_per_s
        if bandwidth is None:
            return None
        moved = max(0, self.tx_bytes_per_s) + max(0, self.rx_bytes_per_s)
        return min(1.0, moved / bandwidth)


@dataclass(frozen=True, slots=True)
class LinkSample:
    at_s: float  # monotonic seconds
    busy: float


def busy_share(samples: Iterable[LinkSample], *, now_s: float, window_s: float = WINDOW_S) -> float | None:
    """The mean busy share of the samples in the window ending at `now_s`; None until they cover at least
    half of it (a GPU just read for the first time, or whose readings failed meanwhile)."""
    inside = [s for s in samples if now_s - window_s < s.at_s <= now_s]
    if len(inside) < 2 or inside[-1].at_s - inside[0].at_s < window_s / 2:
        return None
    return sum(min(1.0, max(0.0, s.busy)) for s in inside) / len(inside)


@dataclass(frozen=True, slots=True)
class HostBacked:
    """A device of a claim that opted into memory oversubscription, and its host-backed bytes now."""

    uid: ClaimUID
    namespace: str
    name: str
    device: str
    gpu_uuid: GpuUUID
    gpu_index: int
    managed_bytes: int

    @property
    def key(self) -> tuple[ClaimUID, str]:
        return (self.uid, self.device)


@dataclass(frozen=True, slots=True)
class PagingWarning:
    claim: HostBacked
    busy: float  # the link's busy share over the window
    window_s: float
    sharing: int  # claims holding host-backed bytes on the GPU, this one included

    @property
    def message(self) -> str:
        c = self.claim
        text = (
            f"claim {c.namespace}/{c.name} ({c.device}) holds {_size(c.managed_bytes)} of host-backed "
            f"(managed) memory on GPU {c.gpu_index} ({c.gpu_uuid}), whose PCIe link was busy "
            f"{round(100 * self.busy)}% of the last {round(self.window_s)}s: it probably spends most of its "
            "time paging between host and device memory."
        )
        if self.sharing > 1:
            text += (
                f" The link's traffic is the GPU's: {self.sharing} claims on it hold host-backed memory, "
                "and which of them moves the pages is not known."
            )
        return text + (
            " To keep its memory on the device: ask for less virtualMemory (a smaller claim), run it on a "
            "node group with a lower memoryOversubscription, or drop the opt-in (VgpuConfig "
            "memoryOversubscription)."
        )


def _size(n: int) -> str:
    return f"{n / GIB:.1f}Gi".replace(".0Gi", "Gi") if n >= GIB else f"{n // MIB}Mi"


@dataclass(frozen=True, slots=True)
class Decision:
    warnings: tuple[PagingWarning, ...]
    # claim device → monotonic seconds of its last warning, for the next round
    warned: Mapping[tuple[ClaimUID, str], float]


def decide(
    *,
    shares: Mapping[GpuUUID, float | None],
    claims: Sequence[HostBacked],
    warned: Mapping[tuple[ClaimUID, str], float],
    now_s: float,
    window_s: float = WINDOW_S,
    threshold: float = BUSY_SHARE,
    repeat_s: float = REPEAT_S,
) -> Decision:
    """Which claims to warn now. A claim device is warned when its GPU's link was busy more than
    `threshold` of the window and it holds host-backed bytes, once: not again while that holds, nor within
    `repeat_s` of its last warning. Once the condition is seen not to hold (the link quieter, no host-backed
    bytes, the claim gone) after `repeat_s`, it may be warned again. A GPU whose share is unknown decides
    nothing."""
    holders: dict[GpuUUID, int] = {}
    for c in claims:
        if c.managed_bytes > 0:
            holders[c.gpu_uuid] = holders.get(c.gpu_uuid, 0) + 1
    out: list[PagingWarning] = []
    kept: dict[tuple[ClaimUID, str], float] = {}
    seen: set[tuple[ClaimUID, str]] = set()
    for c in claims:
        seen.add(c.key)
        share = shares.get(c.gpu_uuid)
        last = warned.get(c.key)
        if share is None:
            if last is not None:
                kept[c.key] = last  # nothing known: nothing changes
            continue
        holds = share > threshold and c.managed_bytes > 0
        if holds and last is None:
            out.append(PagingWarning(c, share, window_s, holders[c.gpu_uuid]))
            kept[c.key] = now_s
        elif last is not None and (holds or now_s - last < repeat_s):
            kept[c.key] = last
    for key, last in warned.items():  # a claim gone keeps its mark until repeat_s passed
        if key not in seen and now_s - last < repeat_s:
            kept[key] = last
    return Decision(tuple(out), kept)
