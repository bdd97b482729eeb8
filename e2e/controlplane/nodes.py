"""Node objects without a kubelet: created through the API, Ready, with allocatable resources, untainted."""

from __future__ import annotations

from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.controlplane.errors import ControlPlaneError

log = structlog.get_logger(__name__)

_MERGE_PATCH = "application/merge-patch+json"


def node_status(*, cpu: str, memory: str, pods: str) -> dict[str, Any]:
    resources = {"cpu": cpu, "memory": memory, "pods": pods}
    return {
        "capacity": resources,
        "allocatable": resources,
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "KubeletReady",
                "message": "tessera e2e node (no kubelet)",
            }
        ],
        "addresses": [{"type": "InternalIP", "address": "127.0.0.1"}],
    }


def create_node(
    api: k8s.ApiClient,
    *,
    name: str,
    labels: dict[str, str] | None = None,
    cpu: str = "64",
    memory: str = "256Gi",
    pods: str = "110",
) -> Any:
    """Creates Node `name` and returns it as read back: Ready, schedulable, untainted."""
    core = k8s.CoreV1Api(api)
    all_labels = {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux", "kubernetes.io/arch": "amd64"}
    all_labels.update(labels or {})
    status = node_status(cpu=cpu, memory=memory, pods=pods)
    body = {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {"name": name, "labels": all_labels},
        "spec": {},
        "status": status,
    }
    try:
        core.create_node(k8s.V1Node.model_validate(body))
        # A create may drop status; the status subresource is what the kubelet would write.
        core.patch_node_status(name, {"status": status}, _content_type=_MERGE_PATCH)
        # TaintNodesByCondition adds node.kubernetes.io/not-ready on create; no node-lifecycle controller runs
        # here to lift it, so it is lifted here, as a kubelet reporting Ready would have it lifted.
        core.patch_node(name, {"spec": {"taints": None}}, _content_type=_MERGE_PATCH)
        node = core.read_node(name)
    except ApiException as e:
        raise ControlPlaneError(f"creating node {name!r} failed: {e.status} {e.reason}: {e.body}") from e
    taints = node.spec.taints if node.spec else None
    if taints:
        raise ControlPlaneError(f"node {name!r} still has taints {taints}")
    log.info("node.created", node=name, labels=all_labels)
    return node


def delete_node(api: k8s.ApiClient, *, name: str) -> None:
    try:
        k8s.CoreV1Api(api).delete_node(name)
    except ApiException as e:
        if e.status != 404:
            raise ControlPlaneError(f"deleting node {name!r} failed: {e.status} {e.reason}") from e
