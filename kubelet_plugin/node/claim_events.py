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
from datetime import UTC, datetime
from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.vocabulary.excerpt import clip
from dra_driver.vocabulary.names import DRIVER_NAME
from kubelet_plugin.node.events import MAX_MESSAGE_CHARS

MAX_PODS = 8
_MAX_NAME = 253
_MAX_UID = 64
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")

log = structlog.get_logger(__name__)


def reserved_pods(claim: Any) -> tuple[tuple[str, str], ...]:
    """(name, UID) of the pods a claim object (`kubernetes` v1 model) is reserved for, checked, sorted."""
    consumers = getattr(getattr(claim, "status", None), "reserved_for", None)
    if not isinstance(consumers, list):
        return ()
    pods = {
        (name, uid)
        for c in consumers
        if getattr(c, "resource", None) == "pods"
        and getattr(c, "api_group", None) in (None, "")
        and isinstance(name := getattr(c, "name", None), str)
        and isinstance(uid := getattr(c, "uid", None), str)
        and len(name) <= _MAX_NAME
        and 0 < len(uid) <= _MAX_UID
        and _SUBDOMAIN.fullmatch(name)
    }
    return tuple(sorted(pods))[:MAX_PODS]


class ClaimEvents:
    def __init__(self, *, api: Any, node_name: str, component: str = DRIVER_NAME) -> None:  # an ApiClient
        self._core = k8s.CoreV1Api(api)
        self._resource = k8s.ResourceV1Api(api)
        self._node = node_name
        self._component = component

    def warn(self, *, namespace: str, name: str, uid: str, reason: str, message: str) -> int:
        """A Warning Event on the claim of that UID and on its pods; how many were written."""
        try:
            claim = self._resource.read_namespaced_resource_claim(name=name, namespace=namespace)
        except (ApiException, TransportError) as e:
            log.warning("claim event not written", claim=f"{namespace}/{name}", reason=reason, error=str(e))
            return 0
        if getattr(claim.metadata, "uid", None) != uid:
            return 0  # gone, or another claim of that name now
        claim_ref = k8s.V1ObjectReference(
            api_version="resource.k8s.io/v1", kind="ResourceClaim", namespace=namespace, name=name, uid=uid
        )
        pods = [
            k8s.V1ObjectReference(api_version="v1", kind="Pod", namespace=namespace, name=pod, uid=pod_uid)
            for pod, pod_uid in reserved_pods(claim)
        ]
        targets = [claim_ref, *pods]
        return sum(self._post(namespace, target, reason=reason, message=message) for target in targets)

    def _post(self, namespace: str, target: k8s.V1ObjectReference, *, reason: str, message: str) -> bool:
        now = datetime.now(UTC)
        event = k8s.CoreV1Event(
            metadata=k8s.V1ObjectMeta(generate_name=f"{(target.name or '')[:200]}.tessera-"),
            involved_object=target,
            reason=reason,
            message=clip(message, MAX_MESSAGE_CHARS),
            type="Warning",
            source=k8s.V1EventSource(component=self._component, host=self._node),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self._core.create_namespaced_event(namespace=namespace, body=event)
        except (ApiException, TransportError) as e:
            what = f"{target.kind} {namespace}/{target.name}"
            log.warning("claim event not written", object=what, reason=reason, error=str(e))
            return False
        return True
