"""Watching the Node for another GPU device plugin (dra_driver/core/foreign_plugins.py): while one advertises
GPUs here, the publisher publishes no device, and a Warning Event on the Node says why; when it is gone, a
Normal Event says so and the devices come back. The Node is read by kubelet_plugin/node/node_reader.py."""

from __future__ import annotations

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.core.foreign_plugins import REFUSED_REASON, foreign_gpu_resources, refusal_message
from dra_driver.io.api_objects import NODE, Json, field_at, path
from dra_driver.io.rest_calls import RestCalls
from kubelet_plugin.node.events import NodeEvents

log = structlog.get_logger(__name__)


class ForeignPluginGuard:
    """`blocked` while the Node advertises another plugin's GPUs and the GPUs are not declared split."""

    def __init__(
        self,
        *,
        rest: RestCalls,
        node_name: str,
        split: bool,
        events: NodeEvents | None,
    ) -> None:
        self._rest, self._node, self._split = rest, node_name, split
        self._events = events
        self.found: tuple[str, ...] = ()

    @property
    def blocked(self) -> bool:
        return bool(self.found) and not self._split

    def check(self) -> bool:
        """Read the Node's capacity; True when what it says changed (an unreadable Node changes nothing)."""
        return self.observe(read_node(self._rest, self._node))

    def observe(self, node: Json | None) -> bool:
        """Take the Node as read (None: unreadable); True when whether publishing is blocked changed."""
        if node is None:
            return False
        capacity = field_at(node, "status", "capacity") or {}
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


def read_node(rest: RestCalls, node_name: str) -> Json | None:
    """The Node (its JSON), or None (and a warning line) when the API server does not answer."""
    try:
        return rest.get(path(NODE, name=node_name))
    except (ApiException, TransportError) as e:
        log.warning("plugin.node_unreadable", node=node_name, error=str(e))
        return None
