"""The API calls a kubelet makes, on plain JSON, with library errors translated at this edge."""

from __future__ import annotations

import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import structlog
from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError

from dra_driver.io.api_objects import CLAIM, EVENTS, POD, PODS, SLICE, SLICES, path
from dra_driver.io.rest_calls import RestCalls
from e2e.kubelet_standin.errors import StandInError
from e2e.kubelet_standin.pod_status import now

log = structlog.get_logger(__name__)

Json = dict[str, Any]


class GoneError(StandInError):
    """A watch's resource version is too old: list again."""


class NodeApi:
    """What the kubelet of `node_name` reads and writes."""

    def __init__(self, *, api: ApiClient, node_name: str) -> None:
        self.node_name = node_name
        self._rest = RestCalls(api)  # plain JSON: the typed API classes cost ~2 CPU-s of every start

    def _field(self) -> str:
        return f"spec.nodeName={self.node_name}"

    def list_pods(self) -> tuple[list[Json], str]:
        try:
            data = self._rest.get(PODS, fieldSelector=self._field())
        except (ApiException, HTTPError) as e:
            raise StandInError(f"listing pods of node {self.node_name} failed: {e}") from e
        return list(data.get("items") or []), str(data["metadata"]["resourceVersion"])

    def watch_pods(self, *, resource_version: str, timeout_s: int) -> Iterator[tuple[str, Json]]:
        """(event type, pod) until the server ends the watch; GoneError when `resource_version` expired."""
        events = self._rest.watch(
            PODS,
            timeout_s=timeout_s,
            fieldSelector=self._field(),
            allowWatchBookmarks="true",
            resourceVersion=resource_version,
        )
        try:
            for event in events:
                if event["type"] == "ERROR":
                    if event["object"].get("code") == 410:
                        raise GoneError("pod watch expired")
                    raise StandInError(f"pod watch failed: {event['object'].get('message')}")
                yield event["type"], event["object"]
        except ApiException as e:
            raise StandInError(f"watching pods of node {self.node_name} failed: {e}") from e
        except HTTPError as e:
            raise StandInError(f"pod watch of node {self.node_name} broke: {e}") from e
        finally:
            events.close()

    def get_claim(self, *, namespace: str, name: str) -> Json | None:
        try:
            return self._rest.get(path(CLAIM, namespace=namespace, name=name))
        except ApiException as e:
            if e.status == 404:
                return None
            raise StandInError(
                f"reading ResourceClaim {namespace}/{name} failed: {e.status} {e.reason}"
            ) from e
        except HTTPError as e:
            raise StandInError(f"reading ResourceClaim {namespace}/{name} failed: {e}") from e

    def patch_pod_status(self, *, namespace: str, name: str, uid: str, status: Mapping[str, Any]) -> None:
        body = {"metadata": {"uid": uid}, "status": status}
        try:
            self._rest.patch(path(POD, namespace=namespace, name=name) + "/status", body)
        except ApiException as e:
            raise StandInError(
                f"writing the status of pod {namespace}/{name} failed: {e.status} {e.reason}"
            ) from e
        except HTTPError as e:
            raise StandInError(f"writing the status of pod {namespace}/{name} failed: {e}") from e

    def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete: grace period 0, only this incarnation of the pod."""
        body = {"gracePeriodSeconds": 0, "preconditions": {"uid": uid}}
        try:
            self._rest.delete(path(POD, namespace=namespace, name=name), body)
        except ApiException as e:
            if e.status in (404, 409):
                return  # gone already, or another pod of that name now
            raise StandInError(f"deleting pod {namespace}/{name} failed: {e.status} {e.reason}") from e
        except HTTPError as e:
            raise StandInError(f"deleting pod {namespace}/{name} failed: {e}") from e

    def event(self, *, pod: Mapping[str, Any], kind: str, reason: str, message: str) -> None:
        meta = pod["metadata"]
        at = now()
        body = {
            "metadata": {"name": f"{meta['name']}.{uuid.uuid4().hex[:12]}", "namespace": meta["namespace"]},
            "involvedObject": {
                "kind": "Pod",
                "apiVersion": "v1",
                "namespace": meta["namespace"],
                "name": meta["name"],
                "uid": meta["uid"],
            },
            "reason": reason,
            "message": message[:1024],
            "type": kind,
            "source": {"component": "kubelet", "host": self.node_name},
            "firstTimestamp": at,
            "lastTimestamp": at,
            "count": 1,
        }
        try:
            self._rest.create(path(EVENTS, namespace=meta["namespace"]), body)
        except (ApiException, HTTPError) as e:
            log.warning("event.failed", pod=meta["name"], reason=reason, error=str(e))

    def wipe_slices(self, *, driver: str | None = None) -> int:
        """Deletes this node's ResourceSlices (of one driver, or all): what the kubelet does at start and when
        a driver's last plugin has gone."""
        selector = self._field() if driver is None else f"{self._field()},spec.driver={driver}"
        try:
            data = self._rest.get(SLICES, fieldSelector=selector)
            names = [s["metadata"]["name"] for s in data.get("items") or []]
            for name in names:
                try:
                    self._rest.delete(path(SLICE, name=name))
                except ApiException as e:
                    if e.status != 404:
                        raise
        except (ApiException, HTTPError) as e:
            raise StandInError(f"wiping ResourceSlices of node {self.node_name} failed: {e}") from e
        return len(names)
