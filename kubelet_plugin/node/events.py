"""Warning Events on this node's Node object: how the daemon says loudly what an administrator must know.

Events about cluster-scoped objects (Nodes) live in the `default` namespace. Failing to write one is logged,
never raised: the event only repeats what the log already says.
"""

from __future__ import annotations

import structlog
from kubernetes.client.exceptions import ApiException

# urllib3's own errors (not OSError) when the API server is down or drops a connection.
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.io.api_objects import EVENTS, event_body, path
from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.names import DRIVER_NAME

EVENT_NAMESPACE = "default"
CHECKPOINT_REBUILT_REASON = "CheckpointRebuilt"  # unreadable: set aside, rebuilt from the node
CHECKPOINT_NEWER_REASON = "CheckpointFromNewerVersion"  # start-up refused, nothing changed
# the scheduler cannot keep a shared family apart from the others: it is not published
SHARING_UNENFORCED_REASON = "SharingUnenforced"

log = structlog.get_logger(__name__)


class NodeEvents:
    def __init__(self, *, rest: RestCalls, node_name: str, component: str = DRIVER_NAME) -> None:
        self._rest = rest
        self._node = node_name
        self._component = component

    def warn(self, *, reason: str, message: str) -> bool:
        """Post a Warning Event on the Node; False (and a log line) when the API server did not take it."""
        return self._post(reason=reason, message=message, kind="Warning")

    def normal(self, *, reason: str, message: str) -> bool:
        """Post a Normal Event on the Node (something went back to how it should be)."""
        return self._post(reason=reason, message=message, kind="Normal")

    def _post(self, *, reason: str, message: str, kind: str) -> bool:
        target = {"apiVersion": "v1", "kind": "Node", "name": self._node}
        event = event_body(
            target, reason=reason, message=message, kind=kind, component=self._component, host=self._node
        )
        try:
            self._rest.create(path(EVENTS, namespace=EVENT_NAMESPACE), event)
        except ApiException as e:
            log.warning(
                "node event not written", node=self._node, reason=reason, status=e.status, why=e.reason
            )
            return False
        except TransportError as e:
            log.warning("node event not written", node=self._node, reason=reason, error=str(e))
            return False
        return True
