"""What a Volcano user writes: pods with `schedulerName: volcano` and PodGroups that make them a gang."""

from __future__ import annotations

import copy
from typing import Any

from e2e.volcano.config import SCHEDULER_NAME

Json = dict[str, Any]
GROUP_ANNOTATION = "scheduling.k8s.io/group-name"
QUEUE_ANNOTATION = "scheduling.volcano.sh/queue-name"


def podgroup(name: str, *, min_member: int, queue: str = "default") -> Json:
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "PodGroup",
        "metadata": {"name": name},
        "spec": {"minMember": min_member, "queue": queue},
    }


def queue(name: str, *, weight: int = 1, capability: Json | None = None) -> Json:
    """A Volcano queue (cluster-scoped); `capability` caps what its pods hold."""
    spec: Json = {"weight": weight, "reclaimable": True}
    if capability:
        spec["capability"] = capability
    return {
        "apiVersion": "scheduling.volcano.sh/v1beta1",
        "kind": "Queue",
        "metadata": {"name": name},
        "spec": spec,
    }


def volcano_pod(pod: Json, *, name: str, group: str | None = None, queue: str | None = None) -> Json:
    """A copy of `pod` named `name`, placed by Volcano, in PodGroup `group` when given (else the controller
    manager makes a group of one for it, in `queue` when given)."""
    out = copy.deepcopy(pod)
    out["metadata"] = {"name": name}
    annotations = {
        **({GROUP_ANNOTATION: group} if group is not None else {}),
        **({QUEUE_ANNOTATION: queue} if queue is not None else {}),
    }
    if annotations:
        out["metadata"]["annotations"] = annotations
    out["spec"]["schedulerName"] = SCHEDULER_NAME
    return out


def claim_template(
    name: str, device_class: str, *, cel: str | None = None, capacity: Json | None = None
) -> Json:
    exactly: Json = {"deviceClassName": device_class}
    if cel is not None:
        exactly["selectors"] = [{"cel": {"expression": cel}}]
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod_with_template(name: str, template: str, *, node: str | None = None) -> Json:
    """A pod of one container holding claim `gpu` from `template` (for kube-scheduler unless made a
    Volcano pod)."""
    spec: Json = {
        "restartPolicy": "Never",
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "main",
                "image": "nvcr.io/nvidia/cuda:12.4.1-base-ubuntu22.04",
                "command": ["sleep", "infinity"],
                "resources": {"claims": [{"name": "gpu"}], "requests": {"cpu": "100m", "memory": "64Mi"}},
            }
        ],
    }
    if node is not None:
        spec["nodeSelector"] = {"kubernetes.io/hostname": node}
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}
