"""Talking to the e2e cluster the way a user does: `kubectl` from the built bin dir, and waits on pods and
claims through the `kubernetes` client (plain JSON)."""

from __future__ import annotations

import json
import subprocess
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.kubelet_standin.errors import StandInError

Json = dict[str, Any]


class WaitTimeoutError(StandInError):
    """A condition on the cluster did not come true in time."""


@dataclass(frozen=True, slots=True)
class Kubectl:
    binary: Path
    kubeconfig: Path

    def run(self, *args: str, stdin: str | None = None, check: bool = True) -> str:
        result = subprocess.run(
            [str(self.binary), f"--kubeconfig={self.kubeconfig}", *args],
            input=stdin,
            capture_output=True,
            text=True,
            check=False,
            timeout=120,
        )
        if check and result.returncode != 0:
            raise StandInError(
                f"kubectl {' '.join(args)} failed ({result.returncode}): {result.stderr.strip()}"
            )
        return result.stdout

    def apply(self, documents: Iterable[Json], *, namespace: str | None = None) -> str:
        text = yaml.safe_dump_all(list(documents), sort_keys=False)
        ns = [f"--namespace={namespace}"] if namespace else []
        return self.run("apply", *ns, "-f", "-", stdin=text)

    def apply_path(self, path: Path, *, namespace: str | None = None) -> str:
        ns = [f"--namespace={namespace}"] if namespace else []
        return self.run("apply", *ns, "-f", str(path))


def _raw(response: Any) -> Json:
    data: Json = json.loads(response.data)
    return data


def get_pod(api: k8s.ApiClient, namespace: str, name: str) -> Json | None:
    try:
        return _raw(k8s.CoreV1Api(api).read_namespaced_pod(name, namespace, _preload_content=False))
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def list_pods(api: k8s.ApiClient, namespace: str) -> list[Json]:
    return list(
        _raw(k8s.CoreV1Api(api).list_namespaced_pod(namespace, _preload_content=False)).get("items") or []
    )


def get_claim(api: k8s.ApiClient, namespace: str, name: str) -> Json | None:
    try:
        return _raw(
            k8s.ResourceV1Api(api).read_namespaced_resource_claim(name, namespace, _preload_content=False)
        )
    except ApiException as e:
        if e.status == 404:
            return None
        raise


def list_claims(api: k8s.ApiClient, namespace: str) -> list[Json]:
    return list(
        _raw(k8s.ResourceV1Api(api).list_namespaced_resource_claim(namespace, _preload_content=False)).get(
            "items"
        )
        or []
    )


def wait_for(what: str, check: Callable[[], Any], *, timeout_s: float = 30.0, interval_s: float = 0.1) -> Any:
    """Polls `check` until it returns something truthy; that value is returned."""
    deadline = time.monotonic() + timeout_s
    while True:
        value = check()
        if value:
            return value
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(interval_s)


def scheduled_by(api: k8s.ApiClient, namespace: str, pod: str, *, timeout_s: float = 30.0) -> set[str]:
    """The components that reported a `Scheduled` event for `pod`, once there is one: a scheduler records its
    events through a broadcaster after the bind, so a pod can be Running before its event can be read."""

    def reporters() -> set[str]:
        about = f"involvedObject.name={pod}"
        listed = k8s.CoreV1Api(api).list_namespaced_event(namespace, field_selector=about)
        return {
            e.reporting_component or (e.source.component if e.source else "") or ""
            for e in listed.items
            if e.reason == "Scheduled"
        }

    found: set[str] = wait_for(f"a Scheduled event for {namespace}/{pod}", reporters, timeout_s=timeout_s)
    return found


def is_running(pod: Json | None) -> bool:
    if pod is None:
        return False
    status = pod.get("status") or {}
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or []
    )
    return status.get("phase") == "Running" and ready


def wait_running(api: k8s.ApiClient, namespace: str, name: str, *, timeout_s: float = 60.0) -> Json:
    pod: Json = wait_for(
        f"pod {namespace}/{name} to run",
        lambda: p if is_running(p := get_pod(api, namespace, name)) else None,
        timeout_s=timeout_s,
    )
    return pod


def pod_claim_name(pod: Json, entry: str) -> str:
    """The ResourceClaim behind the pod's `spec.resourceClaims[name=entry]`."""
    for ref in pod["spec"].get("resourceClaims") or []:
        if ref["name"] == entry and ref.get("resourceClaimName"):
            return str(ref["resourceClaimName"])
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        if status["name"] == entry and status.get("resourceClaimName"):
            return str(status["resourceClaimName"])
    raise StandInError(f"pod {pod['metadata']['name']} has no claim for entry {entry!r}")


def allocated_results(claim: Json) -> list[Json]:
    return list(
        (((claim.get("status") or {}).get("allocation") or {}).get("devices") or {}).get("results") or []
    )


def delete_namespace_contents(api: k8s.ApiClient, namespace: str, *, timeout_s: float = 60.0) -> None:
    """Deletes every Deployment and ReplicaSet (so no pod comes back), pod (gracefully, so the node finalizes
    it) and claim of the namespace, and waits until they are gone: the devices are then unprepared and
    deallocated."""
    core, resource, apps = k8s.CoreV1Api(api), k8s.ResourceV1Api(api), k8s.AppsV1Api(api)
    apps.delete_collection_namespaced_deployment(namespace)
    apps.delete_collection_namespaced_replica_set(namespace)
    core.delete_collection_namespaced_pod(namespace)
    wait_for(f"pods of {namespace} to go", lambda: not list_pods(api, namespace), timeout_s=timeout_s)
    resource.delete_collection_namespaced_resource_claim(namespace)
    wait_for(f"claims of {namespace} to go", lambda: not list_claims(api, namespace), timeout_s=timeout_s)
