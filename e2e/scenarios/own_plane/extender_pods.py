"""The cluster the two extender scenarios share (test_scheduler_extender.py and
test_scheduler_extender_chart.py): three simulated nodes of T4s (a and b with two, c with one), their shares
and whole GPUs made as the trace bench makes them, pinned to a node or left to the scheduler."""

from __future__ import annotations

import time
from typing import Any

from kubernetes import client as k8s

from e2e.benches.trace.cluster import LABEL, TraceCluster
from e2e.benches.trace.gpu_models import model
from e2e.benches.trace.kube_objects import claim_object, pod_object
from e2e.benches.trace.records import TracePod
from e2e.harness.kube import Json

NODES = """sn,cpu_milli,memory_mib,gpu,model
ext-a,16000,65536,2,T4
ext-b,16000,65536,2,T4
ext-c,16000,65536,1,T4
"""
NODE_NAMES = ["ext-a", "ext-b", "ext-c"]
NAMESPACE = "extender"
HOSTNAME = "kubernetes.io/hostname"


def run_pod(
    cluster: TraceCluster, name: str, pod: TracePod, *, node: str | None = None, make_pod: bool = True
) -> Json:
    """The pod's claim made, and the pod too unless `make_pod` is False; the pod's body either way."""
    claim = claim_object(pod, name=name, models=[model("T4")])
    k8s.ResourceV1Api(cluster.api).create_namespaced_resource_claim(
        NAMESPACE, k8s.ResourceV1ResourceClaim.model_validate(claim)
    )
    body = pod_object(
        pod, name=name, claim=name, node_selector={LABEL: "true", **({HOSTNAME: node} if node else {})}
    )
    body["metadata"]["namespace"] = NAMESPACE
    if make_pod:
        k8s.CoreV1Api(cluster.api).create_namespaced_pod(NAMESPACE, k8s.V1Pod.model_validate(body))
    return body


def node_of(cluster: TraceCluster, name: str, *, timeout_s: float = 60.0) -> str:
    """The node the pod is bound to, once it is."""
    core = k8s.CoreV1Api(cluster.api)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found: Any = core.read_namespaced_pod(name, NAMESPACE)
        if found.spec.node_name:
            return str(found.spec.node_name)
        time.sleep(0.5)
    raise AssertionError(f"pod {name} was not bound within {timeout_s}s")
