"""A vgpu claim's recent usage in its status, next to its limits, so `kubectl describe resourceclaim` answers
"is my slice too small": `status.devices[].data.usage` = memory in use (and % of the limit), SM time used,
time throttled by the SM limiter and, for a claim with a ceiling, GPU time above its guarantee (burst) (% of
wall time over the last window); for a claim that opted into memory oversubscription, how much of its memory
the device holds for it and how much is managed memory the driver pages to and from the host.

Read from the claim's region (never from the container). A claim's status is written at most once per
`interval` (default 60 s) and only when one of the three percentages moved by more than `CHANGE_POINTS`
since the last write: the API write rate is bounded by (vgpu claims on the node) / interval, and is zero
for a claim whose usage is steady (docs/metrics.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.libtessera.region_layout import Region, RegionUnreadableError
from dra_driver.vocabulary.names import DRIVER_NAME, USAGE_DATA_KEY, ClaimUID
from kubelet_plugin import metrics
from kubelet_plugin.claims.api import to_api_dict
from kubelet_plugin.claims.prepared_claims import PreparedClaim
from kubelet_plugin.library_files.region import read_region
from kubelet_plugin.library_files.usage_bounds import UsageBounds, node_uptime_ns
from kubelet_plugin.observability.claim_pods import ClaimPods

log = structlog.get_logger(__name__)

USAGE_INTERVAL_S = 60.0
CHANGE_POINTS = 5.0
MIB = 1 << 20
_CONFLICT_RETRIES = 3


@dataclass(frozen=True, slots=True)
class Sample:
    gpu_ns: int
    throttled_ns: int
    at_ns: int  # CLOCK_MONOTONIC of the read
    burst_ns: int = 0


@dataclass(frozen=True, slots=True)
class Usage:
    memory_used_bytes: int
    memory_percent: float  # of the claim's limit
    sm_percent: float  # GPU time the claim's kernels took, of the window's wall time
    throttled_percent: float  # time launches waited for the SM limiter, of the window's wall time
    window_s: float
    burst_percent: float = 0.0  # GPU time above the guaranteed cores, of the window's wall time
    burst_seconds: float = 0.0  # the same since the claim's first launch (the counter)
    # an oversubscribed claim's bytes the device holds for it (its region's "+resident" entry); the rest of
    # memory_used_bytes is managed memory. None: the claim did not opt in
    held_bytes: int | None = None

    @property
    def managed_bytes(self) -> int:
        return 0 if self.held_bytes is None else self.memory_used_bytes - self.held_bytes

    def data(self) -> dict[str, object]:
        data: dict[str, object] = {
            "memoryUsed": f"{self.memory_used_bytes // MIB}Mi",
            "memoryUsedPercent": round(self.memory_percent),
            "smTimeUsedPercent": round(self.sm_percent),
            "throttledPercent": round(self.throttled_percent),
            "windowSeconds": round(self.window_s),
        }
        if self.burst_seconds:  # only a claim with a ceiling ever bursts
            data["burstPercent"] = round(self.burst_percent)
            data["burstSeconds"] = round(self.burst_seconds, 1)
        if self.held_bytes is not None:
            data["memoryHeld"] = f"{self.held_bytes // MIB}Mi"
            data["memoryManaged"] = f"{self.managed_bytes // MIB}Mi"
        return data


def _percent(part: float, whole: float) -> float:
    return 0.0 if whole <= 0 else max(0.0, min(100.0, 100.0 * part / whole))


def usage_between(
    before: Sample, after: Sample, *, used_bytes: int, limit_bytes: int, held_bytes: int | None = None
) -> Usage:
    """`held_bytes`: an oversubscribed claim's device-held bytes (None: the claim did not opt in)."""
    wall = after.at_ns - before.at_ns
    return Usage(
        memory_used_bytes=used_bytes,
        memory_percent=_percent(used_bytes, limit_bytes),
        sm_percent=_percent(after.gpu_ns - before.gpu_ns, wall),
        throttled_percent=_percent(after.throttled_ns - before.throttled_ns, wall),
        window_s=wall / 1e9,
        burst_percent=_percent(after.burst_ns - before.burst_ns, wall),
        burst_seconds=after.burst_ns / 1e9,
        held_bytes=None if held_bytes is None else min(held_bytes, used_bytes),
    )


def moved(old: Usage | None, new: Usage, points: float = CHANGE_POINTS) -> bool:
    """Whether a status write is due: the first, or one percentage moved by more than `points` (the managed
    share of the memory used counts as one)."""
    if old is None:
        return True
    managed = (
        _percent(old.managed_bytes, old.memory_used_bytes),
        _percent(new.managed_bytes, new.memory_used_bytes),
    )
    return any(
        abs(a - b) > points
        for a, b in (
            (old.memory_percent, new.memory_percent),
            (old.sm_percent, new.sm_percent),
            (old.throttled_percent, new.throttled_percent),
            (old.burst_percent, new.burst_percent),
            managed,
        )
    )


class UsageWriter(Protocol):
    def write(self, *, namespace: str, name: str, uid: str, usage: Mapping[str, Mapping[str, object]]) -> Any:
        """Set data.usage of the claim's status.devices entries (device → usage); returns the claim as
        read (None when it is not the claim of that UID)."""
        ...


class ApiUsageWriter:
    """Merge-patches `resourceclaims/status`, conditional on resourceVersion; only our entries' `usage`."""

    def __init__(self, *, api: Any, driver: str = DRIVER_NAME) -> None:  # kubernetes.client.ResourceV1Api
        self._api = api
        self._driver = driver

    def write(self, *, namespace: str, name: str, uid: str, usage: Mapping[str, Mapping[str, object]]) -> Any:
        for attempt in range(_CONFLICT_RETRIES):
            claim = self._api.read_namespaced_resource_claim(name=name, namespace=namespace)
            if claim.metadata.uid != uid or claim.status is None:
                return None
            devices = to_api_dict(claim.status.devices or [])
            touched = False
            for entry in devices:
                if entry.get("driver") == self._driver and entry.get("device") in usage:
                    entry["data"] = {
                        **(entry.get("data") or {}),
                        USAGE_DATA_KEY: dict(usage[entry["device"]]),
                    }
                    touched = True
            if not touched:
                return claim  # prepare has not described the devices yet: nothing to add usage to
            body = {
                "metadata": {"resourceVersion": claim.metadata.resource_version},
                "status": {"devices": devices},
            }
            try:
                self._api.patch_namespaced_resource_claim_status(
                    name=name, namespace=namespace, body=body, _content_type="application/merge-patch+json"
                )
                return claim
            except ApiException as e:
                if e.status == 409 and attempt + 1 < _CONFLICT_RETRIES:
                    continue
                raise
        return None


class UsageStatusLoop:
    """Every `interval`: read each vgpu claim's region; write its usage where it moved enough."""

    def __init__(
        self,
        *,
        claims: Callable[[], Sequence[PreparedClaim]],
        writer: UsageWriter,
        interval: float = USAGE_INTERVAL_S,
        read: Callable[[Path], Region] = read_region,
        clock: Callable[[], int] = time.monotonic_ns,
        pods: ClaimPods | None = None,
    ) -> None:
        self._claims = claims
        self._writer = writer
        self.interval = interval
        self._read = read
        self._clock = clock
        self._samples: dict[tuple[ClaimUID, str], Sample] = {}
        self._written: dict[ClaimUID, dict[str, Usage]] = {}
        self._pods = pods  # where the claims read for a write note their pods (metric labels)
        self._lock = threading.Lock()

    def tick(self) -> int:
        """One round; returns how many claims' statuses were written."""
        live: set[ClaimUID] = set()
        writes = 0
        for claim in self._claims():
            if claim.region is None or not claim.metered_devices:
                continue
            live.add(claim.uid)
            due = self._due(claim)
            if due and self._write(claim, due):
                writes += 1
        with self._lock:  # forget claims that are gone
            self._samples = {k: v for k, v in self._samples.items() if k[0] in live}
            self._written = {k: v for k, v in self._written.items() if k in live}
        return writes

    def _due(self, claim: PreparedClaim) -> dict[str, Usage]:
        assert claim.region is not None
        try:
            region = self._read(claim.region)
        except (RegionUnreadableError, OSError):
            return {}  # no process has run yet, or a tenant damaged it
        now = self._clock()
        uptime = node_uptime_ns()
        new: dict[str, Usage] = {}
        for d in claim.metered_devices:
            found = region.gpu(d.gpu_uuid)
            if found is None:
                continue
            gpu_bounds = UsageBounds(gpu_memory_bytes=d.gpu_memory_bytes, uptime_ns=uptime)
            gpu = gpu_bounds.gpu(found)
            sample = Sample(gpu.gpu_ns, gpu.throttled_ns, now, gpu.burst_ns)
            before = self._samples.get((claim.uid, d.device))
            self._samples[(claim.uid, d.device)] = sample
            held = region.held(d.gpu_uuid)
            if before is not None and sample.at_ns > before.at_ns:
                new[d.device] = usage_between(
                    before,
                    sample,
                    used_bytes=gpu.used_bytes,
                    limit_bytes=d.memory_limit_bytes,
                    held_bytes=None if held is None else gpu_bounds.bytes(held.used_bytes),
                )
        last = self._written.get(claim.uid, {})
        if not any(moved(last.get(device), u) for device, u in new.items()):
            return {}
        return new

    def _write(self, claim: PreparedClaim, usage: dict[str, Usage]) -> bool:
        try:
            read = self._writer.write(
                namespace=claim.namespace,
                name=claim.name,
                uid=claim.uid,
                usage={device: u.data() for device, u in usage.items()},
            )
        except (ApiException, TransportError, OSError) as e:
            metrics.STATUS_WRITES.labels("usage", "error").inc()
            log.warning("claim usage not written", claim=claim.uid, error=str(e))
            return False
        metrics.STATUS_WRITES.labels("usage", "ok").inc()
        with self._lock:
            self._written[claim.uid] = {**self._written.get(claim.uid, {}), **usage}
        if read is not None and self._pods is not None:
            self._pods.note_claim(read)
        return True

    def run(self, stop: threading.Event) -> None:
        while not stop.wait(self.interval):
            try:
                self.tick()
            except Exception:  # one bad round must not end the loop
                log.exception("usage status round failed")
