"""Device health for the kubelet (DRAResourceHealth v1 and v1alpha1).

A poller reads the backend's inventory, decides each GPU's condition (dra_driver.core.gpu_health: the faults
the backend reports plus the fatal ones it latched) and posts every device's health on a board; each kubelet
stream gets the full list at start, on every change, and as a heartbeat (the kubelet marks a device Unknown
when it hears nothing about it for its health-check timeout). A GPU whose condition changed is handed to
`on_gpu_change` (the device taints are republished, an Event says why).

A stream holds a gRPC worker thread for as long as it is open, so streams get their own bounded capacity
(`StreamSlots`, added to the server's pool on top of the workers for prepare and unprepare): a stream past
it is refused at once with RESOURCE_EXHAUSTED, and a stream's slot comes back as soon as the caller goes.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from enum import IntEnum

import grpc
import structlog

from dra_driver.core import families
from dra_driver.core.gpu_health import GpuCondition, HealthPolicy, conditions
from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import DeviceName, GpuUUID
from kubelet_plugin import metrics
from kubelet_plugin.proto.gen import health_v1_pb2 as v1
from kubelet_plugin.proto.gen import health_v1_pb2_grpc as v1_grpc
from kubelet_plugin.proto.gen import health_v1alpha1_pb2 as v1alpha1
from kubelet_plugin.proto.gen import health_v1alpha1_pb2_grpc as v1alpha1_grpc

log = structlog.get_logger(__name__)

HEARTBEAT_SECONDS = 10.0
HEALTH_CHECK_TIMEOUT_SECONDS = 60
HEALTH_STREAMS = 4  # the kubelet keeps one open; the rest cover its reconnects


class StreamSlots:
    """How many health streams may be open at once, across both API versions."""

    def __init__(self, capacity: int = HEALTH_STREAMS) -> None:
        self.capacity = capacity
        self._free = threading.BoundedSemaphore(capacity)

    def take(self) -> _Slot | None:
        return _Slot(self._free) if self._free.acquire(blocking=False) else None


class _Slot:
    def __init__(self, free: threading.BoundedSemaphore) -> None:
        self._free = free
        self._lock = threading.Lock()
        self._held = True

    def give_back(self) -> None:
        with self._lock:
            if self._held:
                self._held = False
                self._free.release()


class Health(IntEnum):
    """The wire numbers of both API versions' HealthStatus."""

    UNKNOWN = 0
    HEALTHY = 1
    UNHEALTHY = 2


@dataclass(frozen=True, slots=True)
class DeviceHealthState:
    device: DeviceName
    health: Health
    message: str = ""


@dataclass(frozen=True, slots=True)
class HealthReport:
    pool: str
    devices: tuple[DeviceHealthState, ...]
    checked_at: int  # unix seconds of the check that produced it


def health_of(
    inventory: Inventory, states: dict[GpuUUID, GpuCondition] | None = None
) -> tuple[DeviceHealthState, ...]:
    """Every device the node can publish; every device of a GPU (each family's) shares its condition (by
    default what the inventory reports now)."""
    gpu_states = conditions(inventory) if states is None else states
    out: list[DeviceHealthState] = []
    for gpu in inventory.gpus:
        condition = gpu_states.get(gpu.uuid)
        healthy = condition is None or condition.healthy
        health = Health.HEALTHY if healthy else Health.UNHEALTHY
        message = "" if condition is None or healthy else condition.message
        names = [n for f in families.FAMILIES for n in f.possible_devices(gpu)]
        out += [DeviceHealthState(device=n, health=health, message=message) for n in names]
    return tuple(out)


def unknown(devices: tuple[DeviceHealthState, ...], why: str) -> tuple[DeviceHealthState, ...]:
    return tuple(DeviceHealthState(device=d.device, health=Health.UNKNOWN, message=why) for d in devices)


class HealthBoard:
    """The latest report and a version number that moves only when some device's health changed."""

    def __init__(self, *, pool: str) -> None:
        self._pool = pool
        self._cond = threading.Condition()
        self._report: HealthReport | None = None
        self._version = 0
        self._closed = False

    def post(self, devices: tuple[DeviceHealthState, ...], *, checked_at: int | None = None) -> bool:
        when = int(time.time()) if checked_at is None else checked_at
        with self._cond:
            changed = self._report is None or self._report.devices != devices
            self._report = HealthReport(pool=self._pool, devices=devices, checked_at=when)
            if changed:
                self._version += 1
                self._cond.notify_all()
            return changed

    @property
    def current(self) -> HealthReport | None:
        with self._cond:
            return self._report

    def wait(
        self, *, after: int, timeout: float, stop: Callable[[], bool] = lambda: False
    ) -> tuple[int, HealthReport] | None:
        """The report once its version moves past `after`, else the current at `timeout`; None if closed
        or when `stop()` turns true (checked whenever `wake` is called)."""
        with self._cond:
            self._cond.wait_for(
                lambda: self._closed or stop() or (self._report is not None and self._version != after),
                timeout=timeout,
            )
            if self._closed or stop():
                return None
            if self._report is None:
                return after, HealthReport(pool=self._pool, devices=(), checked_at=int(time.time()))
            return self._version, self._report

    def wake(self) -> None:
        """Make every waiter look at its `stop` again."""
        with self._cond:
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self._closed = True
            self._cond.notify_all()


GpuChange = Callable[[GpuCondition | None, GpuCondition], None]


class InventoryHealthPoller:
    """Posts `health_of(read())` every `interval` seconds from a daemon thread; `conditions` is each GPU's
    latest condition (the device taints are made from it)."""

    def __init__(
        self,
        *,
        read: Callable[[], Inventory],
        board: HealthBoard,
        interval: float = 5.0,
        on_change: Callable[[], None] | None = None,
        policy: HealthPolicy | None = None,
        on_gpu_change: GpuChange | None = None,
    ) -> None:
        self._read = read
        self._board = board
        self._interval = interval
        self._on_change = on_change
        self._policy = policy or HealthPolicy()
        self._on_gpu_change = on_gpu_change
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._conditions: dict[GpuUUID, GpuCondition] = {}
        self._inventory: Inventory | None = None

    @property
    def conditions(self) -> dict[GpuUUID, GpuCondition]:
        with self._lock:
            return dict(self._conditions)

    @property
    def inventory(self) -> Inventory | None:
        """The latest inventory read (what metrics describe between two checks)."""
        with self._lock:
            return self._inventory

    def _decide(self, inventory: Inventory) -> tuple[DeviceHealthState, ...]:
        with self._lock:
            before = self._conditions
            after = conditions(inventory, previous=before, policy=self._policy, now=int(time.time()))
            self._conditions = after
            self._inventory = inventory
        changed = [(before.get(u), c) for u, c in after.items() if before.get(u) != c]
        for old, new in changed:
            if (old is None and new.healthy) or self._on_gpu_change is None:
                continue
            try:
                self._on_gpu_change(old, new)
            except Exception:  # an observer's failure must not stop health reporting
                log.exception("health change observer failed", gpu=new.uuid)
        return health_of(inventory, after)

    def poll_once(self) -> None:
        result = "ok"
        try:
            devices = self._decide(self._read())
        except TesseraError as e:
            result = "failed"
            previous = self._board.current
            log.warning("health check failed; devices are Unknown", error=str(e))
            devices = unknown(previous.devices if previous else (), f"health check failed: {e}")
        if self._board.post(devices):
            bad = [d.device for d in devices if d.health is not Health.HEALTHY]
            log.info("device health changed", not_healthy=bad)
            if self._on_change is not None:
                self._on_change()  # e.g. republish: unhealthy GPUs leave the ResourceSlices
        # counted once its outcome is posted, so whoever sees the count move sees that outcome; a check that
        # changes nothing shows nowhere else
        metrics.HEALTH_CHECKS.labels(result).inc()

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="health-poller", daemon=True)
        self._thread.start()

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            self.poll_once()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=5)


def _watch(
    board: HealthBoard, context: grpc.ServicerContext, heartbeat: float, slots: StreamSlots
) -> Iterator[HealthReport]:
    slot = slots.take()
    if slot is None:
        log.warning("health stream refused: all slots in use", capacity=slots.capacity)
        context.abort(
            grpc.StatusCode.RESOURCE_EXHAUSTED,
            f"{slots.capacity} health streams are open already; retry when one closes",
        )
    ended = threading.Event()

    def on_end() -> None:  # the RPC is over (cancelled, timed out, finished): free its slot at once
        ended.set()
        slot.give_back()
        board.wake()

    if not context.add_callback(on_end):
        on_end()
    try:
        version = -1
        while context.is_active() and not ended.is_set():
            got = board.wait(after=version, timeout=heartbeat, stop=ended.is_set)
            if got is None:
                return
            version, report = got
            yield report
    finally:
        slot.give_back()


class _Watching:
    """What both API versions' servicers share: the board they report from, the heartbeat, the slots."""

    def __init__(
        self, board: HealthBoard, *, heartbeat: float = HEARTBEAT_SECONDS, slots: StreamSlots | None = None
    ) -> None:
        self._board = board
        self._heartbeat = heartbeat
        self.slots = slots if slots is not None else StreamSlots()

    def _reports(self, context: grpc.ServicerContext) -> Iterator[HealthReport]:
        return _watch(self._board, context, self._heartbeat, self.slots)


class HealthV1Servicer(_Watching, v1_grpc.DRAResourceHealthServicer):
    def NodeWatchResources(  # noqa: N802 - gRPC method name
        self, request: v1.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[v1.NodeWatchResourcesResponse]:
        for report in self._reports(context):
            health = [
                v1.DeviceHealth(
                    device=v1.DeviceIdentifier(pool_name=report.pool, device_name=d.device),
                    health=v1.HealthStatus.ValueType(d.health.value),
                    last_updated_time=report.checked_at,
                    health_check_timeout_seconds=HEALTH_CHECK_TIMEOUT_SECONDS,
                    message=d.message,
                )
                for d in report.devices
            ]
            yield v1.NodeWatchResourcesResponse(devices=health)


class HealthV1alpha1Servicer(_Watching, v1alpha1_grpc.DRAResourceHealthServicer):
    """v1alpha1 has no timeout and no message per device."""

    def NodeWatchResources(  # noqa: N802 - gRPC method name
        self, request: v1alpha1.NodeWatchResourcesRequest, context: grpc.ServicerContext
    ) -> Iterator[v1alpha1.NodeWatchResourcesResponse]:
        for report in self._reports(context):
            health = [
                v1alpha1.DeviceHealth(
                    device=v1alpha1.DeviceIdentifier(pool_name=report.pool, device_name=d.device),
                    health=v1alpha1.HealthStatus.ValueType(d.health.value),
                    last_updated_time=report.checked_at,
                )
                for d in report.devices
            ]
            yield v1alpha1.NodeWatchResourcesResponse(devices=health)
