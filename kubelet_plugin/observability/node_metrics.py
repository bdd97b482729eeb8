"""The metrics made at scrape time: allocation per GPU and per claim, live usage from the claims' regions,
device health. Nothing here calls into a container or the GPU: the inventory is the health loop's latest
reading, the claims are the checkpoint's (`prepared_claims`), usage is what the interception library keeps in
each claim's region (read with pread, `kubelet_plugin.library_files.region`).

Cost: one checkpoint stat per scrape (the claim list and its label strings are rebuilt only when the
checkpoint changed), one region read per vgpu claim, and the text written directly in the exposition format
(prometheus_client's generic renderer validates and escapes every label of every sample again, which for 256
claims alone takes longer than the 50 ms a scrape may cost). When some region has live processes, one bounded
scan of /proc finds which containers hold them (`kubelet_plugin.claims.claim_processes`: at most once per
scrape, and only when a slot's remembered holder no longer holds it).
`make bench-metrics` measures it.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path

from prometheus_client.core import CounterMetricFamily, GaugeMetricFamily, Metric

from dra_driver.core import families
from dra_driver.core.cordon import GpuCordon
from dra_driver.core.families import vgpu
from dra_driver.core.gpu_health import GpuCondition
from dra_driver.libtessera.region_layout import Region, RegionGpu, RegionUnreadableError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import METRICS_PREFIX as P
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.claims import claim_processes
from kubelet_plugin.claims.claim_processes import ClaimProcess
from kubelet_plugin.claims.prepared_claims import ClaimDevice, PreparedClaim, prepared_claims
from kubelet_plugin.health.service import HealthReport
from kubelet_plugin.library_files.region import read_region
from kubelet_plugin.library_files.usage_bounds import UsageBounds, node_uptime_ns
from kubelet_plugin.record.checkpoint import Checkpoint

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
    (f"{P}gpu_cordoned", "gauge", "1 when an administrator cordoned or drained the GPU", GPU_LABELS),
    (
        f"{P}gpu_cordon_info",
        "gauge",
        "A cordoned GPU (1): NoSchedule (cordon) or NoExecute (drain)",
        (*GPU_LABELS, "effect"),
    ),
    (
        f"{P}gpu_pcie_busy_ratio",
        "gauge",
        "Share of the GPU's PCIe link busy over the paging watch's window (NVML), where read",
        GPU_LABELS,
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
        f"{P}claim_memory_held_bytes",
        "gauge",
        "Of an oversubscribed claim's memory, what its live processes hold as device memory",
        CLAIM_LABELS,
    ),
    (
        f"{P}claim_memory_managed_bytes",
        "gauge",
        "Of an oversubscribed claim's memory, the managed memory the driver pages to and from the host",
        CLAIM_LABELS,
    ),
    (
        f"{P}claim_process_memory_used_bytes",
        "gauge",
        "Device memory one live process of the claim holds (pid in its container, container ID)",
        (*CLAIM_LABELS, "pid", "slot", "container"),
    ),
    (f"{P}claim_processes", "gauge", "Live processes of the claim on a GPU", CLAIM_LABELS),
    (f"{P}claim_gpu_seconds_total", "counter", "GPU time the claim's kernels took", CLAIM_LABELS),
    (f"{P}claim_throttled_seconds_total", "counter", "Time launches waited for the SM limiter", CLAIM_LABELS),
    (
        f"{P}claim_burst_seconds_total",
        "counter",
        "GPU time the claim got above its guaranteed cores, in time its GPU's other claims left idle",
        CLAIM_LABELS,
    ),
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
    cordons: Callable[[], Mapping[int, GpuCordon]] = dict  # GPU index → an administrator's cordon
    pods: Callable[[ClaimUID], str] = lambda _uid: ""  # the claim's pods where known ("a,b")
    pods_version: Callable[[], int] = lambda: 0  # moves when `pods` learnt something
    proc: Path = claim_processes.PROC  # where the node's processes are listed (hostPID: all of them)
    pcie_busy: Callable[[], Mapping[GpuUUID, float]] = dict  # the paging watch's busy share per GPU


def describe() -> Iterator[Metric]:
    """Every family, without samples (for registries, docs and the dashboard's test)."""
    for name, kind, text, labels in FAMILIES:
        if kind == "counter":
            yield CounterMetricFamily(name.removesuffix("_total"), text, labels=labels)
        else:
            yield GaugeMetricFamily(name, text, labels=labels)


def _escape(value: str) -> str:
    return value.replace("\\", "\\\\").replace("\n", "\\n").replace('"', '\\"')


def label_text(names: tuple[str, ...], values: tuple[str, ...]) -> str:
    """`a="x",b="y"` with values escaped as the text format wants."""
    return ",".join(f'{n}="{_escape(v)}"' for n, v in zip(names, values, strict=True))


def _number(value: float) -> str:
    return str(value) if isinstance(value, int) else repr(float(value))


@dataclass(frozen=True, slots=True)
class _Claims:
    """The prepared claims with their label strings, rebuilt when the checkpoint or the inventory changes."""

    stamp: tuple[object, int, int]  # the checkpoint's, the inventory's identity, the pods' version
    claims: tuple[PreparedClaim, ...]
    labels: Mapping[tuple[ClaimUID, str], str]  # (uid, device) → its CLAIM_LABELS text
    claim_labels: Mapping[ClaimUID, str]  # uid → namespace, claim, uid


class NodeMetrics:
    """Renders the scrape-time families (`render`); `FAMILIES` lists them."""

    def __init__(self, sources: NodeSources) -> None:
        self._s = sources
        self._cache: _Claims | None = None
        self._table = claim_processes.ProcessTable(proc=sources.proc)

    def _claims(self, inventory: Inventory) -> _Claims:
        stamp = (self._s.checkpoint_stamp(), id(inventory), self._s.pods_version())
        cache = self._cache
        if cache is not None and cache.stamp == stamp:
            return cache
        cp = self._s.checkpoint()
        claims = prepared_claims(cp, inventory, self._s.claims_dir) if cp is not None else ()
        labels: dict[tuple[ClaimUID, str], str] = {}
        short: dict[ClaimUID, str] = {}
        for c in claims:
            pod = self._s.pods(c.uid)
            short[c.uid] = label_text(("namespace", "claim", "uid"), (c.namespace, c.name, c.uid))
            for d in c.devices:
                labels[(c.uid, d.device)] = label_text(
                    CLAIM_LABELS, (c.namespace, c.name, c.uid, pod, d.device, d.gpu_uuid)
                )
        self._cache = _Claims(stamp, claims, labels, short)
        return self._cache

    def render(self) -> bytes:
        out: dict[str, list[str]] = {name: [] for name, _, _, _ in FAMILIES}
        inventory = self._s.inventory()
        if inventory is not None:
            cache = self._claims(inventory)
            self._gpus(out, inventory, cache.claims)
            self._table.new_scrape()
            for claim in cache.claims:
                self._claim(out, claim, cache)
        self._health(out)
        text: list[str] = []
        for name, kind, help_text, _ in FAMILIES:
            text.append(f"# HELP {name} {help_text}\n# TYPE {name} {kind}\n")
            text.extend(out[name])
        return "".join(text).encode()

    def _gpus(
        self, out: dict[str, list[str]], inventory: Inventory, claims: tuple[PreparedClaim, ...]
    ) -> None:
        on: dict[GpuUUID, list[ClaimDevice]] = defaultdict(list)
        for claim in claims:
            for d in claim.devices:
                on[d.gpu_uuid].append(d)
        tessera_mig = {d.mig_uuid for devices in on.values() for d in devices if d.mig_uuid}
        conditions, cordons, pcie_busy = self._s.conditions(), self._s.cordons(), self._s.pcie_busy()
        for gpu in inventory.gpus:
            g = label_text(GPU_LABELS, (str(gpu.index), gpu.uuid))
            used = on.get(gpu.uuid, [])

            def put(name: str, value: float, extra: str = "", g: str = g) -> None:
                out[f"{P}{name}"].append(f"{P}{name}{{{g}{extra}}} {_number(value)}\n")

            info = label_text(("product", "mig_enabled"), (gpu.product_name, str(gpu.mig_enabled).lower()))
            put("gpu_info", 1, "," + info)
            put("gpu_memory_bytes", gpu.memory_bytes)
            put("gpu_multiprocessors", gpu.multiprocessors)
            for family in families.names():
                put("gpu_devices_in_use", sum(d.family == family for d in used), f',family="{family}"')
            put("gpu_vgpu_shares", self._s.vgpu_shares)
            put("gpu_vgpu_shares_used", sum(d.family == vgpu.NAME for d in used))
            put("gpu_memory_allocated_bytes", sum(d.memory_limit_bytes for d in used))
            put("gpu_cores_allocated_ratio", float(sum(d.cores_ratio for d in used)))
            counts: dict[tuple[str, str], int] = defaultdict(int)
            for inst in gpu.mig_instances:
                counts[(inst.profile_name, "tessera" if inst.uuid in tessera_mig else "admin")] += 1
            for (profile, owner), n in sorted(counts.items()):
                put("gpu_mig_instances", n, "," + label_text(("profile", "owner"), (profile, owner)))
            condition = conditions.get(gpu.uuid)
            put("gpu_healthy", 1 if condition is None or condition.healthy else 0)
            if condition is not None and condition.effect is not None:
                why = label_text(("reason", "effect"), (condition.reason, condition.effect.value))
                put("gpu_fault_info", 1, "," + why)
            cordon = cordons.get(gpu.index)
            put("gpu_cordoned", 0 if cordon is None else 1)
            if cordon is not None:
                put("gpu_cordon_info", 1, "," + label_text(("effect",), (cordon.effect.value,)))
            busy = pcie_busy.get(gpu.uuid)
            if busy is not None:
                put("gpu_pcie_busy_ratio", busy)

    def _claim(self, out: dict[str, list[str]], claim: PreparedClaim, cache: _Claims) -> None:
        for d in claim.devices:
            labels = cache.labels[(claim.uid, d.device)]
            out[f"{P}claim_memory_limit_bytes"].append(
                f"{P}claim_memory_limit_bytes{{{labels}}} {d.memory_limit_bytes}\n"
            )
            out[f"{P}claim_cores_limit_ratio"].append(
                f"{P}claim_cores_limit_ratio{{{labels}}} {d.cores_ratio!r}\n"
            )
        if claim.region is None or not claim.metered_devices:
            return
        try:
            region: Region | None = read_region(claim.region)
        except (RegionUnreadableError, OSError):
            region = None  # not written yet (no process ran) or damaged by a tenant: no usage to show
        name = f"{P}claim_region_readable"
        out[name].append(f"{name}{{{cache.claim_labels[claim.uid]}}} {1 if region else 0}\n")
        if region is None:
            return
        uptime = node_uptime_ns()
        slots = self._table.holders(claim.region, [p.slot for p in region.processes])
        for d in claim.metered_devices:
            gpu = region.gpu(d.gpu_uuid)
            if gpu is not None:
                bounds = UsageBounds(gpu_memory_bytes=d.gpu_memory_bytes, uptime_ns=uptime)
                labels = cache.labels[(claim.uid, d.device)]
                clipped = bounds.gpu(gpu)
                _usage(out, region, clipped, labels, bounds, holders=slots)
                held = region.held(d.gpu_uuid)
                if held is not None:
                    _oversubscribed(out, clipped.used_bytes, bounds.bytes(held.used_bytes), labels)

    def _health(self, out: dict[str, list[str]]) -> None:
        report = self._s.health()
        if report is None:
            return
        name = f"{P}device_health"
        for d in report.devices:
            labels = label_text(("device", "state"), (d.device, d.health.name.lower()))
            out[name].append(f"{name}{{{labels}}} 1\n")


def _oversubscribed(out: dict[str, list[str]], used: int, held: int, labels: str) -> None:
    """A claim that opted into oversubscription: its used bytes split into device-held and managed (what the
    held entry does not count; where its pages are at the moment is the driver's business)."""
    held = min(held, used)
    for name, value in (("claim_memory_held_bytes", held), ("claim_memory_managed_bytes", used - held)):
        out[f"{P}{name}"].append(f"{P}{name}{{{labels}}} {_number(value)}\n")


def _usage(
    out: dict[str, list[str]],
    region: Region,
    gpu: RegionGpu,
    labels: str,
    bounds: UsageBounds,
    *,
    holders: Mapping[int, ClaimProcess],
) -> None:
    """`gpu` already clipped to `bounds`; a process's series is keyed by its region slot too (two
    containers' pid 1 are two processes). Where the kernel shows who holds a slot, its pid and container
    are the kernel's; else the pid is the region's and the container "" (the region's numbers name no one)."""

    def put(name: str, value: float) -> None:
        out[f"{P}{name}"].append(f"{P}{name}{{{labels}}} {_number(value)}\n")

    put("claim_memory_used_bytes", gpu.used_bytes)
    put("claim_processes", len(region.processes))
    per_process = out[f"{P}claim_process_memory_used_bytes"]
    for p in region.processes:
        holder = holders.get(p.slot)
        pid, container = (holder.pid, holder.container) if holder else (p.pid, "")
        per_process.append(
            f'{P}claim_process_memory_used_bytes{{{labels},pid="{pid}",slot="{p.slot}",'
            f'container="{container}"}} {bounds.bytes(p.used_bytes[gpu.entry])}\n'
        )
    put("claim_gpu_seconds_total", gpu.gpu_ns * NS)
    put("claim_throttled_seconds_total", gpu.throttled_ns * NS)
    put("claim_burst_seconds_total", gpu.burst_ns * NS)
    put("claim_priority_held_seconds_total", gpu.held_ns * NS)
    put("claim_launches_total", gpu.launches)
    put("claim_oom_refusals_total", gpu.oom_refusals)
