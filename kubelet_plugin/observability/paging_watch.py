"""The `MostlyPaging` Warning Event: a claim that opted into memory oversubscription and probably spends
most of its time paging (docs/gpu-sharing.md, "Oversubscription", "When a claim pages").

Every `sample_s` the watch reads each GPU's PCIe throughput and link from NVML (`PcieSource`; the simulated
backend has none, and the daemon runs no watch there), and keeps the last `window_s` of readings. Where a
GPU's link was busy more than half of the window, it reads the host-backed bytes of the opted-in claims on
it from their regions (the tenant's word, clipped as the metrics clip it) and `dra_driver.core.paging`
decides whom to warn: each such claim once, on the claim and its pods, not again while that holds.

A GPU whose reading fails (NotSupported: vGPU guests, some boards) gets one debug line and no event; nothing
here stops the daemon. The window's busy share of every GPU read is `tessera_gpu_pcie_busy_ratio`.
"""

from __future__ import annotations

import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import Protocol

import structlog

from dra_driver.backends.base import PcieSource
from dra_driver.core.paging import (
    BUSY_SHARE,
    REPEAT_S,
    SAMPLE_S,
    WINDOW_S,
    HostBacked,
    LinkSample,
    PagingWarning,
    busy_share,
    decide,
)
from dra_driver.libtessera.region_layout import Region, RegionUnreadableError
from dra_driver.vocabulary.errors import InventoryError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.claims.prepared_claims import PreparedClaim
from kubelet_plugin.library_files.region import read_region
from kubelet_plugin.library_files.usage_bounds import UsageBounds, node_uptime_ns

MOSTLY_PAGING_REASON = "MostlyPaging"

log = structlog.get_logger(__name__)


class ClaimWarnings(Protocol):
    def warn(self, *, namespace: str, name: str, uid: str, reason: str, message: str) -> int:
        """A Warning Event on the claim (and its pods); how many were written."""
        ...


class PagingWatch:
    def __init__(
        self,
        *,
        source: PcieSource,
        inventory: Callable[[], Inventory | None],
        claims: Callable[[], Sequence[PreparedClaim]],
        events: ClaimWarnings | None,
        sample_s: float = SAMPLE_S,
        window_s: float = WINDOW_S,
        threshold: float = BUSY_SHARE,
        repeat_s: float = REPEAT_S,
        read: Callable[[Path], Region] = read_region,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._source = source
        self._inventory = inventory
        self._claims = claims
        self._events = events
        self.sample_s = sample_s
        self._window_s = window_s
        self._threshold = threshold
        self._repeat_s = repeat_s
        self._read = read
        self._clock = clock
        self._keep = int(window_s / sample_s) * 2 + 2  # readings per GPU, bounded
        self._samples: dict[GpuUUID, deque[LinkSample]] = {}
        self._unread: set[GpuUUID] = set()  # GPUs whose reading failed (logged once each)
        self._warned: Mapping[tuple[ClaimUID, str], float] = {}
        self._shares: Mapping[GpuUUID, float] = {}

    def busy_ratios(self) -> Mapping[GpuUUID, float]:
        """Each GPU's busy share over the last window, where known (for the metrics)."""
        return self._shares

    def sample(self) -> None:
        inventory = self._inventory()
        if inventory is None:
            return
        now = self._clock()
        for gpu in inventory.gpus:
            try:
                busy = self._source.pcie_traffic(gpu=gpu.uuid).busy
                if busy is None:
                    raise InventoryError(f"GPU {gpu.uuid}: NVML reports a PCIe link of no known bandwidth")
            except InventoryError as e:
                if gpu.uuid not in self._unread:
                    log.debug(
                        "paging: no PCIe throughput, so no paging events for GPU", gpu=gpu.uuid, error=str(e)
                    )
                    self._unread.add(gpu.uuid)
                self._samples.pop(gpu.uuid, None)
                continue
            self._samples.setdefault(gpu.uuid, deque(maxlen=self._keep)).append(LinkSample(now, busy))
        present = {g.uuid for g in inventory.gpus}
        for gone in set(self._samples) - present:
            del self._samples[gone]

    def host_backed(self) -> list[HostBacked]:
        """The opted-in claims' devices and their host-backed bytes now, from their regions."""
        found: list[HostBacked] = []
        uptime = node_uptime_ns()
        for claim in self._claims():
            if claim.region is None or not claim.metered_devices:
                continue
            try:
                region = self._read(claim.region)
            except (RegionUnreadableError, OSError):
                continue  # no process ran yet, or a tenant damaged it
            for d in claim.metered_devices:
                entry, held = region.gpu(d.gpu_uuid), region.held(d.gpu_uuid)
                if entry is None or held is None:
                    continue  # not opted in, or no process on that GPU yet
                bounds = UsageBounds(gpu_memory_bytes=d.gpu_memory_bytes, uptime_ns=uptime)
                used = bounds.gpu(entry).used_bytes
                managed = used - min(bounds.bytes(held.used_bytes), used)
                found.append(
                    HostBacked(
                        claim.uid, claim.namespace, claim.name, d.device, d.gpu_uuid, d.gpu_index, managed
                    )
                )
        return found

    def evaluate(self) -> tuple[PagingWarning, ...]:
        now = self._clock()
        shares = {
            uuid: busy_share(samples, now_s=now, window_s=self._window_s)
            for uuid, samples in self._samples.items()
        }
        self._shares = {uuid: s for uuid, s in shares.items() if s is not None}
        busy = any(s > self._threshold for s in self._shares.values())
        decision = decide(
            shares=shares,
            claims=self.host_backed() if busy else (),  # regions are read only while some link is busy
            warned=self._warned,
            now_s=now,
            window_s=self._window_s,
            threshold=self._threshold,
            repeat_s=self._repeat_s,
        )
        self._warned = decision.warned
        for w in decision.warnings:
            c = w.claim
            log.warning("claim mostly paging", claim=f"{c.namespace}/{c.name}", uid=c.uid, message=w.message)
            if self._events is not None:
                self._events.warn(
                    namespace=c.namespace,
                    name=c.name,
                    uid=c.uid,
                    reason=MOSTLY_PAGING_REASON,
                    message=w.message,
                )
        return decision.warnings

    def tick(self) -> tuple[PagingWarning, ...]:
        self.sample()
        return self.evaluate()

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.sample_s):
            try:
                self.tick()
            except Exception:  # one bad round must not end the loop
                log.exception("paging watch round failed")
