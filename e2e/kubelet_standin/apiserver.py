"""The API calls a kubelet makes, on plain JSON, with library errors translated at this edge."""

from __future__ import annotations

import json
import uuid
from collections.abc import Iterator, Mapping
from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import HTTPError

from e2e.kubelet_standin.errors import StandInError
from e2e.kubelet_standin.pod_status import now

log = structlog.get_logger(__name__)

Json = dict[str, Any]
_MERGE = "application/merge-patch+json"


class GoneError(StandInError):
    """A watch's resource version is too old: list again."""


def _load(response: Any) -> Json:
    data: Json = json.loads(response.data)
    return data


class NodeApi:
    """What the kubelet of `node_name` reads and writes."""

    def __init__(self, *, api: k8s.ApiClient, node_name: str) -> None:
        self.node_name = node_name
        self._api = api
        self._core = k8s.CoreV1Api(api)
        self._resource = k8s.ResourceV1Api(api)

    def _field(self) -> str:
        return f"spec.nodeName={self.node_name}"

    def list_pods(self) -> tuple[list[Json], str]:
        try:
            data = _load(
                self._core.list_pod_for_all_namespaces(field_selector=self._field(), _preload_content=False)
            )
        except (ApiException, HTTPError) as e:
            raise StandInError(f"listing pods of node {self.node_name} failed: {e}") from e
        return list(data.get("items") or []), str(data["metadata"]["resourceVersion"])

    def watch_pods(self, *, resource_version: str, timeout_s: int) -> Iterator[tuple[str, Json]]:
        """(event type, pod) until the server ends the watch; GoneError when `resource_version` expired."""
        try:
            response: Any = self._core.list_pod_for_all_namespaces(
                field_selector=self._field(),
                watch=True,
                allow_watch_bookmarks=True,
                resource_version=resource_version,
                timeout_seconds=timeout_s,
                _preload_content=False,
                _request_timeout=timeout_s + 10,
            )
        except (ApiException, HTTPError) as e:
            raise StandInError(f"watching pods of node {self.node_name} failed: {e}") from e
        try:
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if not line or line.isspace():
                    continue
                event = json.loads(line)
                if event["type"] == "ERROR":
                    if event["object"].get("code") == 410:
                        raise GoneError("pod watch expired")
                    raise StandInError(f"pod watch failed: {event['object'].get('message')}")
                yield event["type"], event["object"]
        except HTTPError as e:
            raise StandInError(f"pod watch of node {self.node_name} broke: {e}") from e
        finally:
            response.close()
            response.release_conn()

    def get_claim(self, *, namespace: str, name: str) -> Json | None:
        try:
            return _load(
                self._resource.read_namespaced_resource_claim(name, namespace, _preload_content=False)
            )
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
            self._core.patch_namespaced_pod_status(name, namespace, body, _content_type=_MERGE)
        except ApiException as e:
            raise StandInError(
                f"writing the status of pod {namespace}/{name} failed: {e.status} {e.reason}"
            ) from e
        except HTTPError as e:
            raise StandInError(f"writing the status of pod {namespace}/{name} failed: {e}") from e

    def delete_pod(self, *, namespace: str, name: str, uid: str) -> None:
        """The kubelet's final delete: grace period 0, only this incarnation of the pod."""
        body = k8s.V1DeleteOptions.model_validate({"gracePeriodSeconds": 0, "preconditions": {"uid": uid}})
        try:
            self._core.delete_namespaced_pod(name, namespace, body=body)
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
            self._core.create_namespaced_event(meta["namespace"], k8s.CoreV1Event.model_validate(body))
        except (ApiException, HTTPError) as e:
            log.warning("event.failed", pod=meta["name"], reason=reason, error=str(e))

    def wipe_slices(self, *, driver: str | None = None) -> int:
        """Deletes this node's ResourceSlices (of one driver, or all): what the kubelet does at start and when
        a driver's last plugin has gone."""
        selector = self._field() if driver is None else f"{self._field()},spec.driver={driver}"
        try:
            data = _load(self._resource.list_resource_slice(field_selector=selector, _preload_content=False))
            names = [s["metadata"]["name"] for s in data.get("items") or []]
            for name in names:
                try:
                    self._resource.delete_resource_slice(name)
                except ApiException as e:
                    if e.status != 404:
                        raise
        except (ApiException, HTTPError) as e:
            raise StandInError(f"wiping ResourceSlices of node {self.node_name} failed: {e}") from e
        return len(names)
