"""What the real-node scenarios do and look at: apply manifests, wait for pods the real kubelet runs, read the
probe's reports from the kubelet's container logs, and the claims' allocations from the API."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

from kubernetes import client as k8s

from dra_driver.vocabulary.names import qualified
from e2e.harness.kube import (
    Json,
    allocated_results,
    get_claim,
    get_pod,
    pod_claim_name,
    wait_for,
    wait_running,
)
from e2e.harness.node import driver_slices
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode

MIB = 1 << 20


def apply(bed: SimCluster, ns: str, documents: Sequence[Json]) -> None:
    bed.server_apply.apply(documents, namespace=ns)


def running(node: RealNode, ns: str, name: str, *, timeout_s: float = 90.0) -> Json:
    return wait_running(node.api, ns, name, timeout_s=timeout_s)


def delete_pod(node: RealNode, ns: str, name: str, *, timeout_s: float = 60.0) -> None:
    """Deletes gracefully and waits until the kubelet has finalized the pod (its claims unprepared first)."""
    k8s.CoreV1Api(node.api).delete_namespaced_pod(name, ns)
    wait_for(f"pod {ns}/{name} to go", lambda: get_pod(node.api, ns, name) is None, timeout_s=timeout_s)


def events(node: RealNode, ns: str, pod: str) -> list[str]:
    """The pod's events as "Reason: message"."""
    items = (
        k8s.CoreV1Api(node.api).list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}").items
    )
    return [f"{e.reason}: {e.message}" for e in items]


def report(node: RealNode, pod: Json, container: str, *, timeout_s: float = 60.0) -> dict[str, Any]:
    """The probe's report from `container` of `pod` (once it printed it)."""
    found: dict[str, Any] = wait_for(
        f"the probe report of {pod['metadata']['name']}/{container}",
        lambda: node.probe(pod, container),
        timeout_s=timeout_s,
        interval_s=0.2,
    )
    return found


def claim_of(node: RealNode, ns: str, pod: Json, entry: str) -> Json:
    claim = get_claim(node.api, ns, pod_claim_name(pod, entry))
    assert claim is not None
    return claim


def results(node: RealNode, ns: str, pod: Json, entry: str) -> list[Json]:
    return allocated_results(claim_of(node, ns, pod, entry))


def gpu_index(device: str) -> int:
    """`gpu-1-vgpu` → 1."""
    return int(device.split("-")[1])


def limited_gpu(report: dict[str, Any]) -> dict[str, Any]:
    limited = [g for g in report["gpus"] if g["limited"]]
    assert len(limited) == 1, report["gpus"]
    gpu: dict[str, Any] = limited[0]
    return gpu


def mounts(report: dict[str, Any]) -> dict[str, str]:
    return {m["path"]: m["options"] for m in report["mounts"]}


def device_nodes(report: dict[str, Any]) -> dict[str, tuple[int, int]]:
    return {d["path"]: (d["major"], d["minor"]) for d in report["deviceNodes"]}


def published_attribute(node: RealNode, device: str, name: str) -> Any:
    """An attribute of `device` as the plugin published it for the real node."""
    for s in driver_slices(node.api, node.name):
        for d in s["spec"].get("devices") or []:
            if d["name"] == device:
                return next(iter(d["attributes"][qualified(name)].values()))
    raise AssertionError(f"device {device} is not published by {node.name}")
