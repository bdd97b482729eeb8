"""Pod status bodies the kubelet writes through the status subresource: Running with every container ready,
or Pending with a container the runtime refused to create."""

from __future__ import annotations

import datetime
from collections.abc import Mapping
from typing import Any

from e2e.kubelet_standin.container_edits import ContainerConfig

CONTAINER_ID_SCHEME = "tessera-standin"
HOST_IP = "127.0.0.1"


def now() -> str:
    return datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _condition(kind: str, status: bool, at: str, reason: str = "", message: str = "") -> dict[str, Any]:
    condition = {"type": kind, "status": "True" if status else "False", "lastTransitionTime": at}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def _containers(pod: Mapping[str, Any]) -> list[Mapping[str, Any]]:
    return list((pod.get("spec") or {}).get("containers") or [])


def _start_time(pod: Mapping[str, Any], at: str) -> str:
    return str((pod.get("status") or {}).get("startTime") or at)


def running_status(pod: Mapping[str, Any], *, pod_ip: str) -> dict[str, Any]:
    at = now()
    uid = pod["metadata"]["uid"]
    statuses = [
        {
            "name": c["name"],
            "image": c.get("image", ""),
            "imageID": f"{CONTAINER_ID_SCHEME}://{c.get('image', '')}",
            "containerID": f"{CONTAINER_ID_SCHEME}://{uid}/{c['name']}",
            "ready": True,
            "started": True,
            "restartCount": 0,
            "state": {"running": {"startedAt": at}},
        }
        for c in _containers(pod)
    ]
    return {
        "phase": "Running",
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "podIP": pod_ip,
        "podIPs": [{"ip": pod_ip}],
        "startTime": _start_time(pod, at),
        "conditions": [
            _condition("PodReadyToStartContainers", True, at),
            _condition("Initialized", True, at),
            _condition("ContainersReady", True, at),
            _condition("Ready", True, at),
            _condition("PodScheduled", True, at),
        ],
        "containerStatuses": statuses,
    }


def failed_status(pod: Mapping[str, Any], containers: Mapping[str, ContainerConfig]) -> dict[str, Any]:
    """What the kubelet reports when the runtime cannot create a container: Pending, container waiting
    with CreateContainerError and the runtime's message."""
    at = now()
    statuses = []
    for c in _containers(pod):
        config = containers.get(c["name"])
        error = config.error if config is not None else ""
        statuses.append(
            {
                "name": c["name"],
                "image": c.get("image", ""),
                "imageID": "",
                "ready": False,
                "started": False,
                "restartCount": 0,
                "state": {
                    "waiting": (
                        {"reason": "CreateContainerError", "message": error}
                        if error
                        else {"reason": "ContainerCreating"}
                    )
                },
            }
        )
    return {
        "phase": "Pending",
        "hostIP": HOST_IP,
        "hostIPs": [{"ip": HOST_IP}],
        "startTime": _start_time(pod, at),
        "conditions": [
            _condition("Initialized", True, at),
            _condition("ContainersReady", False, at, "ContainersNotReady", "containers with unready status"),
            _condition("Ready", False, at, "ContainersNotReady", "containers with unready status"),
            _condition("PodScheduled", True, at),
        ],
        "containerStatuses": statuses,
    }
