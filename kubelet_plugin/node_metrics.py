"""The metrics made at scrape time: allocation per GPU and per claim, live usage from the claims' regions,
device health. Nothing here calls into a container or the GPU: the inventory is the health loop's latest
reading, the claims are the checkpoint's (`prepared_claims`), usage is what the interception library keeps in
each claim's region (read with pread, `kubelet_plugin.region`).

Cost: one checkpoint stat per scrape (the claim list is rebuilt only when the checkpoint changed), one region
read per vgpu claim. `make bench-metrics` measures a scrape of 256 claims.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric
from prometheus_client.registry import Collector

from dra_driver.gpu_health import GpuCondition
from dra_driver.model import Gpu, Inventory
from dra_driver.names import METRICS_PREFIX as P
from dra_driver.names import ClaimUID, Family, GpuUUID
from kubelet_plugin.checkpoint import Checkpoint
from kubelet_plugin.health import HealthReport
from kubelet_plugin.prepared_claims import ClaimDevice, PreparedClaim, prepared_claims
from kubelet_plugin.region import Region, RegionUnreadableError, read_region

NS = 1e-9
GPU_LABELS = ("gpu", "gpu_uuid")
CLAIM_LABELS = ("namespace", "claim", "uid", "pod", "device", "gpu_uuid")

# name (as exposed), type, help, labels: every family this collector makes, even when it has no sample
FAMILIES: tuple[tuple[str, str, str, tuple[str, ...]], ...] = (
    (f"{P}gpu_info", "gauge", "A GPU of the node (1)", (*GPU_LABELS, "product", "mig_enabled")),
    (f"{P}gpu_memory_bytes", "gauge", "A GPU's device memory", GPU_LABELS),
    (f"{P}gpu_multiprocessors", "gauge", "A GPU's streaming multiprocessors", GPU_LABELS),
    (f"{P}gpu_devices_in_use", "gauge", "Prepared devices on a GPU, by family", (*GPU_LABELS, "family")),
    (f"{P}gpu_vgpu_shares", "gauge", "How many vgpu claims may share a GPU", GPU_LABELS),
    (f"{P}gpu_vgpu_shares_used", "gauge", "vgpu claims prepared on a GPU", GPU_LABELS),
    (f"{P}gpu_memory_allocated_bytes", "gauge", "Device memory given to prepared claims", GPU_LABELS),
    (f"{P}gpu_cores_allocated_ratio", "gauge", "Share of a GPU's SMs given to prepared claims", GPU_LABELS),
    (
        f"{P}gpu_mig_instances",
        "gauge",
        "Live MIG instances, by profile and owner (tessera or admin)",
        (*GPU_LABELS, "profile", "owner"),
    ),
    (f"{P}gpu_healthy", "gauge", "1 when the GPU is healthy, 0 when its devices are tainted", GPU_LABELS),
    (
        f"{P}gpu_fault_info",
        "gauge",
        "Why a GPU is unhealthy (1): the taint's value and effect",
        (*GPU_LABELS, "reason", "effect"),
    ),
    (
        f"{P}device_health",
        "gauge",
        "Each device's health as the kubelet is told: 1, labelled with its state",
        ("device", "state"),
    ),
    (f"{P}claim_memory_limit_bytes", "gauge", "Device memory a claim was given on a GPU", CLAIM_LABELS),
    (f"{P}claim_cores_limit_ratio", "gauge", "Share of a GPU's SMs a claim was given (1: all)", CLAIM_LABELS),
    (
        f"{P}claim_region_readable",
        "gauge",
        "1 when the claim's region could be read",
        ("namespace", "claim", "uid"),
    ),
    (f"{P}claim_memory_used_bytes", "gauge", "Device memory the claim's live processes hold", CLAIM_LABELS),
    (
        f"{P}claim_process_memory_used_bytes",
        "gauge",
        "Device memory one live process of the claim holds (pid in its container)",
        (*CLAIM_LABELS, "pid"),
    ),
    (f"{P}claim_processes", "gauge", "Live processes of the claim on a GPU", CLAIM_LABELS),
    (f"{P}claim_gpu_seconds_total", "counter", "GPU time the claim's kernels took", CLAIM_LABELS),
    (f"{P}claim_throttled_seconds_total", "counter", "Time launches waited for the SM limiter", CLAIM_LABELS),
    (
        f"{P}claim_priority_held_seconds_total",
        "counter",
        "Time launches waited behind a high-priority claim",
        CLAIM_LABELS,
    ),
    (f"{P}claim_launches_total", "counter", "Launches through the SM limiter", CLAIM_LABELS),
    (
        f"{P}claim_oom_refusals_total",
        "counter",
        "Allocations refused by the claim's memory limit (the container's out-of-memory errors)",
        CLAIM_LABELS,
    ),
)


@dataclass(frozen=True, slots=True)
class NodeSources:
    """Where a scrape reads from; each callable is cheap (latest values, no I/O but the checkpoint read)."""

    inventory: Callable[[], Inventory | None]
    checkpoint: Callable[[], Checkpoint | None]  # None: unreadable now
    checkpoint_stamp: Callable[[], object]  # changes whenever the checkpoint file does
    claims_dir: Path
    health: Callable[[], HealthReport | None]
    conditions: Callable[[], Mapping[GpuUUID, GpuCondition]]
    vgpu_shares: int
    pods: Callable[[ClaimUID], str] = lambda _uid: ""  # the claim's pods where known ("a,b")


def _families() -> dict[str, Metric]:
    out: dict[str, Metric] = {}
    for name, kind, text, labels in FAMILIES:
        if kind == "counter":
            out[name] = CounterMetricFamily(name.removesuffix("_total"), text, labels=labels)
        else:
            out[name] = GaugeMetricFamily(name, text, labels=labels)
    return out


def _add(families: dict[str, Metric], name: str, labels: Iterable[str], value: float) -> None:
    family = families[name]
    assert isinstance(family, (GaugeMetricFamily, CounterMetricFamily))
    family.add_metric(list(labels), value)


class NodeCollector(Collector):
    def __init__(self, sources: NodeSources) -> None:
        self._s = sources
        self._cache: tuple[object, int, tuple[PreparedClaim, ...]] | None = None

    def describe(self) -> Iterator[Metric]:
        yield from _families().values()

    def _claims(self, inventory: Inventory) -> tuple[PreparedClaim, ...]:
        stamp = self._s.checkpoint_stamp()
        if self._cache is not None and self._cache[0] == stamp and self._cache[1] == id(inventory):
            return self._cache[2]
        cp = self._s.checkpoint()
        claims = prepared_claims(cp, inventory, self._s.claims_dir) if cp is not None else ()
        self._cache = (stamp, id(inventory), claims)
        return claims

    def collect(self) -> Iterator[Metric]:
        families = _families()
        inventory = self._s.inventory()
        if inventory is not None:
            claims = self._claims(inventory)
            self._gpus(families, inventory, claims)
            for claim in claims:
                self._claim(families, claim)
        self._health(families)
        yield from families.values()

    def _gpus(self, f: dict[str, Metric], inventory: Inventory, claims: tuple[PreparedClaim, ...]) -> None:
        on: dict[GpuUUID, list[ClaimDevice]] = defaultdict(list)
        for claim in claims:
            for d in claim.devices:
                on[d.gpu_uuid].append(d)
        tessera_mig = {d.mig_uuid for devices in on.values() for d in devices if d.mig_uuid}
        conditions = self._s.conditions()
        for gpu in inventory.gpus:
            g = (str(gpu.index), gpu.uuid)
            used = on.get(gpu.uuid, [])
            _add(f, f"{P}gpu_info", (*g, gpu.product_name, str(gpu.mig_enabled).lower()), 1)
            _add(f, f"{P}gpu_memory_bytes", g, gpu.memory_bytes)
            _add(f, f"{P}gpu_multiprocessors", g, gpu.multiprocessors)
            for family in Family:
                _add(f, f"{P}gpu_devices_in_use", (*g, family.value), sum(d.family is family for d in used))
            _add(f, f"{P}gpu_vgpu_shares", g, self._s.vgpu_shares)
            _add(f, f"{P}gpu_vgpu_shares_used", g, sum(d.family is Family.VGPU for d in used))
            _add(f, f"{P}gpu_memory_allocated_bytes", g, sum(d.memory_limit_bytes for d in used))
            _add(f, f"{P}gpu_cores_allocated_ratio", g, sum(d.cores_ratio for d in used))
            self._mig(f, gpu, g, tessera_mig)
            condition = conditions.get(gpu.uuid)
            healthy = condition is None or condition.healthy
            _add(f, f"{P}gpu_healthy", g, 1 if healthy else 0)
            if condition is not None and condition.effect is not None:
                _add(f, f"{P}gpu_fault_info", (*g, condition.reason, condition.effect.value), 1)

    @staticmethod
    def _mig(f: dict[str, Metric], gpu: Gpu, g: tuple[str, str], tessera_mig: set[str]) -> None:
        counts: dict[tuple[str, str], int] = defaultdict(int)
        for inst in gpu.mig_instances:
            counts[(inst.profile_name, "tessera" if inst.uuid in tessera_mig else "admin")] += 1
        for (profile, owner), n in sorted(counts.items()):
            _add(f, f"{P}gpu_mig_instances", (*g, profile, owner), n)

    def _claim(self, f: dict[str, Metric], claim: PreparedClaim) -> None:
        pod = self._s.pods(claim.uid)
        for d in claim.devices:
            labels = (claim.namespace, claim.name, claim.uid, pod, d.device, d.gpu_uuid)
            _add(f, f"{P}claim_memory_limit_bytes", labels, d.memory_limit_bytes)
            _add(f, f"{P}claim_cores_limit_ratio", labels, d.cores_ratio)
        if claim.region is None or not claim.vgpu_devices:
            return
        try:
            region: Region | None = read_region(claim.region)
        except (RegionUnreadableError, OSError):
            region = None  # not written yet (no process ran) or damaged by a tenant: no usage to show
        _add(f, f"{P}claim_region_readable", (claim.namespace, claim.name, claim.uid), 1 if region else 0)
        if region is None:
            return
        for d in claim.vgpu_devices:
            self._usage(f, region, (claim.namespace, claim.name, claim.uid, pod, d.device, d.gpu_uuid))

    @staticmethod
    def _usage(f: dict[str, Metric], region: Region, labels: tuple[str, ...]) -> None:
        uuid = labels[-1]
        gpu = region.gpu(uuid)
        if gpu is None:
            return
        slot = next(i for i, g in enumerate(region.gpus) if g is gpu)
        _add(f, f"{P}claim_memory_used_bytes", labels, gpu.used_bytes)
        _add(f, f"{P}claim_processes", labels, len(region.processes))
        for p in region.processes:
            _add(f, f"{P}claim_process_memory_used_bytes", (*labels, str(p.pid)), p.used_bytes[slot])
        _add(f, f"{P}claim_gpu_seconds_total", labels, gpu.gpu_ns * NS)
        _add(f, f"{P}claim_throttled_seconds_total", labels, gpu.throttled_ns * NS)
        _add(f, f"{P}claim_priority_held_seconds_total", labels, gpu.held_ns * NS)
        _add(f, f"{P}claim_launches_total", labels, gpu.launches)
        _add(f, f"{P}claim_oom_refusals_total", labels, gpu.oom_refusals)

    def _health(self, f: dict[str, Metric]) -> None:
        report = self._s.health()
        if report is None:
            return
        for d in report.devices:
            _add(f, f"{P}device_health", (d.device, d.health.name.lower()), 1)
