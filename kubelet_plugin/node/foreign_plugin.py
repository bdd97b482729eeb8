"""Watching the Node for another GPU device plugin (dra_driver/core/foreign_plugins.py): while one advertises
GPUs here, the publisher publishes no device, and a Warning Event on the Node says why; when it is gone, a
Normal Event says so and the devices come back."""

from __future__ import annotations

import threading
from collections.abc import Callable
from typing import Any

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.core.foreign_plugins import REFUSED_REASON, foreign_gpu_resources, refusal_message
from kubelet_plugin.node.events import NodeEvents

log = structlog.get_logger(__name__)
CHECK_INTERVAL_S = 30.0


class ForeignPluginGuard:
    """`blocked` while the Node advertises another plugin's GPUs and the GPUs are not declared split."""

    def __init__(
        self,
        *,
        core_api: Any,
        node_name: str,
        split: bool,
        events: NodeEvents | None,
        on_change: Callable[[], None] = lambda: None,
    ) -> None:
        self._core, self._node, self._split = core_api, node_name, split
        self._events, self._on_change = events, on_change
        self.found: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        return bool(self.found) and not self._split

    def check(self) -> bool:
        """Read the Node's capacity; True when what it says changed (an unreadable Node changes nothing)."""
        try:
            node = self._core.read_node(self._node)
        except (ApiException, TransportError) as e:
            log.warning("plugin.node_unreadable", node=self._node, error=str(e))
            return False
        capacity = (node.status.capacity if node.status else None) or {}
        found = foreign_gpu_resources(capacity)
        if found == self.found:
            return False
        was_blocked, self.found = self.blocked, found
        if self.blocked:
            message = refusal_message(self._node, found)
            log.error(
                "plugin.other_gpu_device_plugin", node=self._node, resources=list(found), message=message
            )
            if self._events is not None:
                self._events.warn(reason=REFUSED_REASON, message=message)
        elif found:
            log.info("plugin.other_gpu_device_plugin_split", node=self._node, resources=list(found))
        elif was_blocked and self._events is not None:
            self._events.normal(
                reason=REFUSED_REASON, message=f"node {self._node}: no other GPU device plugin"
            )
        return was_blocked != self.blocked

    def run(self, stop: threading.Event, interval: float = CHECK_INTERVAL_S) -> None:
        while not stop.wait(interval):
            if self.check():
                self._on_change()
