"""The NVML backend's health watcher: critical XID and double-bit ECC events, per GPU, from a thread.

One NVML event set for every GPU (the event types each supports, of XidCriticalError and DoubleBitEccError),
waited on with a timeout so the thread notices `stop()`. What an event means is `fault_of_event` (pure);
which XIDs count is `dra_driver.core.gpu_health`. A driver without the event API (NotSupported,
FunctionNotFound:
some vGPU guests, the fake libnvidia-ml) leaves health to the states the inventory sees (lost, NVML failing),
said once in the log. The faults seen are kept for the life of the process: NVML cannot tell when a GPU
recovered from an XID (the daemon's policy decides what to do with them).
"""

from __future__ import annotations

import ctypes
import threading
from collections.abc import Callable
from typing import Any

import pynvml
import structlog

from dra_driver.backends.nvml_calls import has_code, text
from dra_driver.core.gpu_health import fault_from_xid
from dra_driver.vocabulary.inventory import FaultKind, GpuFault
from dra_driver.vocabulary.names import GpuUUID

log = structlog.get_logger(__name__)

WATCHED_EVENTS = pynvml.nvmlEventTypeXidCriticalError | pynvml.nvmlEventTypeDoubleBitEccError
WAIT_MS = 1000
_WHOLE_GPU = 0xFFFFFFFF
_NO_EVENT_API = (pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND)


def fault_of_event(event_type: int, event_data: int, gpu_instance: int = _WHOLE_GPU) -> GpuFault | None:
    """The fault an NVML event means, or None (an application's XID, an event type not watched)."""
    where = "" if gpu_instance == _WHOLE_GPU else f"MIG GPU instance {gpu_instance}"
    if event_type & pynvml.nvmlEventTypeXidCriticalError:
        return fault_from_xid(int(event_data), detail=where)
    if event_type & pynvml.nvmlEventTypeDoubleBitEccError:
        return GpuFault(kind=FaultKind.ECC_DBE, detail=where)
    return None


class NvmlHealthWatcher:
    """Collects the faults NVML events report; `faults(uuid)` is what was seen so far for that GPU."""

    def __init__(self, *, on_fault: Callable[[GpuUUID, GpuFault], None] | None = None) -> None:
        self._lock = threading.Lock()
        self._faults: dict[GpuUUID, tuple[GpuFault, ...]] = {}
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None
        self._on_fault = on_fault

    def faults(self, uuid: GpuUUID) -> tuple[GpuFault, ...]:
        with self._lock:
            return self._faults.get(uuid, ())

    def record(self, uuid: GpuUUID, fault: GpuFault) -> None:
        with self._lock:
            seen = self._faults.get(uuid, ())
            if fault in seen:
                return
            self._faults[uuid] = (*seen, fault)
        log.warning("nvml.gpu_fault", gpu=uuid, kind=fault.kind.value, xid=fault.xid, detail=fault.detail)
        if self._on_fault is not None:
            self._on_fault(uuid, fault)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, name="nvml-health", daemon=True)
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout=WAIT_MS / 1000 + 5)

    def _register(self) -> tuple[Any, dict[int, GpuUUID]] | None:
        """The event set and handle address → UUID, or None without an event API."""
        try:
            events = pynvml.nvmlEventSetCreate()
        except pynvml.NVMLError as e:
            if has_code(e, *_NO_EVENT_API):
                log.info("nvml.events_unavailable", why=str(e))
                return None
            raise
        uuids: dict[int, GpuUUID] = {}
        for i in range(pynvml.nvmlDeviceGetCount()):
            h = pynvml.nvmlDeviceGetHandleByIndex(i)
            uuid = GpuUUID(text(pynvml.nvmlDeviceGetUUID(h)))
            try:
                mask = pynvml.nvmlDeviceGetSupportedEventTypes(h) & WATCHED_EVENTS
                if mask:
                    pynvml.nvmlDeviceRegisterEvents(h, mask, events)
            except pynvml.NVMLError as e:
                log.warning("nvml.events_not_registered", gpu=uuid, error=str(e))
                continue
            uuids[_address(h)] = uuid
        return events, uuids

    def _run(self) -> None:
        try:
            registered = self._register()
        except pynvml.NVMLError as e:
            log.warning("nvml.health_watch_failed", error=str(e))
            return
        if registered is None:
            return
        events, uuids = registered
        try:
            while not self._stop.is_set():
                try:
                    data = pynvml.nvmlEventSetWait_v2(events, WAIT_MS)
                except pynvml.NVMLError as e:
                    code = getattr(e, "value", None)
                    if code == pynvml.NVML_ERROR_TIMEOUT:
                        continue
                    # GPU_IS_LOST and other failures name no GPU here: the inventory finds which one
                    log.warning("nvml.event_wait_failed", error=str(e))
                    self._stop.wait(WAIT_MS / 1000)
                    continue
                uuid = uuids.get(_address(data.device))
                fault = fault_of_event(data.eventType, data.eventData, data.gpuInstanceId)
                if uuid is not None and fault is not None:
                    self.record(uuid, fault)
        finally:
            try:
                pynvml.nvmlEventSetFree(events)
            except pynvml.NVMLError as e:
                log.info("nvml.event_set_not_freed", error=str(e))


def _address(handle: Any) -> int:
    """A device handle's identity (NVML hands out one pointer per device)."""
    return int(ctypes.cast(handle, ctypes.c_void_p).value or 0)
