"""Warning Events about one claim, where its owner looks: on the ResourceClaim (`kubectl describe
resourceclaim`) and on each pod it is reserved for (`kubectl describe pod`), in the claim's namespace. What
`NodeEvents` (events.py) is for the node, this is for a claim; like it, failing to write is logged, never
raised.

The claim is read first, so an event names the claim of that UID only (a claim deleted and re-created under
the same name gets none). Its `status.reservedFor` is the tenant's to influence, so only core `pods` entries
with a DNS-subdomain name and a UID count, at most `MAX_PODS` of them.
"""

from __future__ import annotations

import re
from typing import Any

import structlog
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.io.api_objects import CLAIM, EVENTS, event_body, field_at, path
from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.names import DRIVER_NAME

MAX_PODS = 8
_MAX_NAME = 253
_MAX_UID = 64
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

log = structlog.get_logger(__name__)


def reserved_pods(claim: object) -> tuple[tuple[str, str], ...]:
    """(name, UID) of the pods a claim (its JSON, as the API server answers) is reserved for, checked,
    sorted."""
    consumers = field_at(claim, "status", "reservedFor")
    if not isinstance(consumers, list):
        return ()
    pods = {
        (name, uid)
        for c in consumers
        if field_at(c, "resource") == "pods"
        and field_at(c, "apiGroup") in (None, "")
        and isinstance(name := field_at(c, "name"), str)
        and isinstance(uid := field_at(c, "uid"), str)
        and len(name) <= _MAX_NAME
        and 0 < len(uid) <= _MAX_UID
        and _SUBDOMAIN.fullmatch(name)
    }
    return tuple(sorted(pods))[:MAX_PODS]


class ClaimEvents:
    def __init__(self, *, api: Any, node_name: str, component: str = DRIVER_NAME) -> None:  # an ApiClient
        self._rest = RestCalls(api)
        self._node = node_name
        self._component = component

    def warn(self, *, namespace: str, name: str, uid: str, reason: str, message: str) -> int:
        """A Warning Event on the claim of that UID and on its pods; how many were written."""
        try:
            claim = self._rest.get(path(CLAIM, namespace=namespace, name=name))
        except (ApiException, TransportError, InvalidNameError) as e:
            log.warning("claim event not written", claim=f"{namespace}/{name}", reason=reason, error=str(e))
            return 0
        if field_at(claim, "metadata", "uid") != uid:
            return 0  # gone, or another claim of that name now
        claim_ref = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "namespace": namespace,
            "name": name,
            "uid": uid,
        }
        pods = [
            {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": pod, "uid": pod_uid}
            for pod, pod_uid in reserved_pods(claim)
        ]
        targets = [claim_ref, *pods]
        return sum(self._post(namespace, target, reason=reason, message=message) for target in targets)

    def _post(self, namespace: str, target: dict[str, str], *, reason: str, message: str) -> bool:
        event = event_body(
            target, reason=reason, message=message, kind="Warning", component=self._component, host=self._node
        )
        try:
            self._rest.create(path(EVENTS, namespace=namespace), event)
        except (ApiException, TransportError) as e:
            what = f"{target['kind']} {namespace}/{target['name']}"
            log.warning("claim event not written", object=what, reason=reason, error=str(e))
            return False
        return True
