"""What the scenarios look at: pods as the stand-in started them, the claims' allocations, the published
devices' attributes. Everything is read from the API, the node's CDI/claim directories, or the simulated
GPUs' state file; nothing from the plugin's internals."""

from __future__ import annotations

import time
from collections.abc import Sequence
from typing import Any

from dra_driver.libtessera.names import VIEW_FILE_NAME
from dra_driver.libtessera.view_layout import Part
from dra_driver.vocabulary.names import Cap, qualified
from e2e.harness.examples import pinned
from e2e.harness.kube import (
    Json,
    allocated_results,
    get_claim,
    get_pod,
    is_running,
    pod_claim_name,
    wait_for,
    wait_running,
)
from e2e.harness.testbed import SimCluster
from e2e.kubelet_standin.container_edits import ContainerConfig
from e2e.kubelet_standin.runtime_record import PodRuntime
from kubelet_plugin.library_files.gpu_view import GpuView

H100 = "sim-h100x8"
MIXED = "sim-mixed-a100-l4"


def apply(bed: SimCluster, ns: str, documents: Sequence[Json]) -> None:
    bed.server_apply.apply(documents, namespace=ns)


def running(bed: SimCluster, ns: str, name: str, *, timeout_s: float = 60.0) -> Json:
    return wait_running(bed.api, ns, name, timeout_s=timeout_s)


def runtime(bed: SimCluster, ns: str, pod: Json) -> PodRuntime:
    node = bed.node_of(pod)
    record: PodRuntime = wait_for(
        f"the runtime record of {pod['metadata']['name']}",
        lambda: node.runtime(namespace=ns, name=pod["metadata"]["name"]),
        timeout_s=10,
    )
    return record


def container(bed: SimCluster, ns: str, pod: Json, name: str) -> ContainerConfig:
    config = runtime(bed, ns, pod).container(name)
    assert not config.error, config.error
    return config


def claim_of(bed: SimCluster, ns: str, pod: Json, entry: str) -> Json:
    claim = get_claim(bed.api, ns, pod_claim_name(pod, entry))
    assert claim is not None
    return claim


def results(bed: SimCluster, ns: str, pod: Json, entry: str) -> list[Json]:
    return allocated_results(claim_of(bed, ns, pod, entry))


def published_device(bed: SimCluster, node: str, device: str) -> Json:
    for s in bed.node(node).slices():
        for d in s["spec"].get("devices") or []:
            if d["name"] == device:
                found: Json = d
                return found
    raise AssertionError(f"device {device} is not published by {node}")


def attribute(bed: SimCluster, node: str, device: str, name: str) -> Any:
    value = published_device(bed, node, device)["attributes"][qualified(name)]
    return next(iter(value.values()))


def consumed(result: Json, cap: str) -> str:
    return str((result.get("consumedCapacity") or {}).get(cap))


def memory_of(result: Json) -> str:
    return consumed(result, Cap.MEMORY)


def pod_named(pod: Json, name: str, node: str | None = None) -> Json:
    """A copy of an example pod under another name, optionally pinned to a node."""
    out = pinned(pod, node, name=name) if node else {**pod, "metadata": {**pod["metadata"], "name": name}}
    return out


def stays_pending(bed: SimCluster, ns: str, name: str, *, seconds: float) -> Json:
    """The pod exists, is not bound for `seconds`, and the scheduler says why."""
    deadline = time.monotonic() + seconds
    pod: Json | None = None
    while time.monotonic() < deadline:
        pod = get_pod(bed.api, ns, name)
        assert pod is not None
        assert not pod["spec"].get("nodeName"), f"{name} was scheduled to {pod['spec'].get('nodeName')}"
        assert not is_running(pod)
        time.sleep(0.5)
    assert pod is not None
    return pod


def unschedulable_message(pod: Json) -> str:
    for c in (pod.get("status") or {}).get("conditions") or []:
        if c.get("type") == "PodScheduled" and c.get("status") == "False":
            return f"{c.get('reason')}: {c.get('message')}"
    return ""


def view_settles(
    bed: SimCluster, node: str, gpu_uuid: str, want: tuple[Part, ...], *, timeout_s: float = 30.0
) -> tuple[int, tuple[Part, ...]]:
    """The GPU's view (frame, parts) once its parts are `want` (the node's burst arbiter rewrites it as the
    claims' work comes and goes), or as last read when they never were."""
    view = GpuView(bed.node(node).gpus_dir / gpu_uuid / VIEW_FILE_NAME)
    try:
        deadline = time.monotonic() + timeout_s
        while view.read_schedule()[1] != want and time.monotonic() < deadline:
            time.sleep(0.1)
        return view.read_schedule()
    finally:
        view.close()
