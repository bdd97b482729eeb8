"""Events on the Node when a GPU becomes unhealthy (its devices tainted) or recovers (taint removed)."""

from __future__ import annotations

import structlog

from dra_driver.core.gpu_health import GpuCondition
from dra_driver.vocabulary.names import UNHEALTHY_TAINT_KEY
from kubelet_plugin.node.events import NodeEvents

GPU_UNHEALTHY_REASON = "GpuUnhealthy"
GPU_RECOVERED_REASON = "GpuRecovered"

log = structlog.get_logger(__name__)


def change_message(before: GpuCondition | None, after: GpuCondition) -> tuple[str, str, bool]:
    """(reason, message, warning) of the Event for a GPU's change of condition."""
    if after.healthy:
        return GPU_RECOVERED_REASON, f"GPU {after.uuid} (index {after.index}) recovered; taint removed", False
    taint = f"{UNHEALTHY_TAINT_KEY}={after.reason}:{after.effect}"
    return GPU_UNHEALTHY_REASON, f"{after.message}; its devices are tainted {taint}", True


class HealthEvents:
    """`InventoryHealthPoller.on_gpu_change`: logs every change, and posts it when an API server is there."""

    def __init__(self, events: NodeEvents | None) -> None:
        self._events = events

    def __call__(self, before: GpuCondition | None, after: GpuCondition) -> None:
        reason, message, warning = change_message(before, after)
        (log.warning if warning else log.info)("gpu health changed", reason=reason, message=message)
        if self._events is None:
            return
        if warning:
            self._events.warn(reason=reason, message=message)
        else:
            self._events.normal(reason=reason, message=message)
