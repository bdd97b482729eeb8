"""The scale benchmark's gang phase (`--schedulers …,volcano`): one Volcano PodGroup (minMember = the gang's
size) of workers, each with a vgpu claim (10Gi / 20 %) made from one ResourceClaimTemplate, created at once on
the scale cluster. vc-scheduler binds all of them in one cycle or none. Measured: first create → every worker
bound, and → every worker placed on a sample node (the ones with a kubelet) Running."""

from __future__ import annotations

from dataclasses import dataclass

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.benches.pods import Tracker, create_all, pod
from e2e.benches.scale.cluster import LABEL, ScaleCluster
from e2e.benches.scale.family_run import NAMESPACE, VC_SCHEDULER, clean, cpu_s, wait_bound
from e2e.benches.scale.workloads import vgpu
from e2e.harness.kube import list_pods, wait_for
from e2e.volcano.workloads import GROUP_ANNOTATION, claim_template, podgroup

GROUP = "gang"
TEMPLATE = "gang-vgpu"
VOLCANO_GROUP, VOLCANO_VERSION, PODGROUPS = "scheduling.volcano.sh", "v1beta1", "podgroups"


@dataclass(frozen=True, slots=True)
class GangRun:
    size: int
    bound: int  # workers bound within the budget
    bound_s: float  # first create → last worker bound (nan unless all were)
    create_s: float  # first create → last create returned
    on_sample: int  # workers placed on the sample nodes
    running_s: float  # first create → the last of those Running (nan when none landed there)
    nodes: int  # nodes the gang was spread over
    scheduler_cpu_s: float


def gang_workers(size: int) -> list[dict[str, object]]:
    """`size` Volcano pods of PodGroup `gang`, each with its own claim from the vgpu template."""
    bodies = []
    for k in range(size):
        body = pod(f"w-{k:03d}", TEMPLATE, node_selector={LABEL: "true"})
        body["metadata"]["annotations"] = {GROUP_ANNOTATION: GROUP}
        body["spec"]["schedulerName"] = VC_SCHEDULER.scheduler_name
        bodies.append(body)
    return bodies


def _create_group(api: k8s.ApiClient, size: int) -> None:
    template = claim_template(
        TEMPLATE, "vgpu.tessera.dev", capacity=vgpu(10, 20).request["capacity"]["requests"]
    )
    k8s.ResourceV1Api(api).create_namespaced_resource_claim_template(
        NAMESPACE, k8s.V1ResourceClaimTemplate.model_validate(template)
    )
    k8s.CustomObjectsApi(api).create_namespaced_custom_object(
        VOLCANO_GROUP, VOLCANO_VERSION, NAMESPACE, PODGROUPS, podgroup(GROUP, min_member=size)
    )


def _delete_group(api: k8s.ApiClient) -> None:
    try:
        k8s.CustomObjectsApi(api).delete_namespaced_custom_object(
            VOLCANO_GROUP, VOLCANO_VERSION, NAMESPACE, PODGROUPS, GROUP
        )
    except ApiException as e:
        if e.status != 404:
            raise
    k8s.ResourceV1Api(api).delete_namespaced_resource_claim_template(TEMPLATE, NAMESPACE)


def run_gang(cluster: ScaleCluster, size: int, *, budget_s: float) -> GangRun:
    """`budget_s`: how long to wait for the gang to be bound (it binds whole: a stall ends the wait)."""
    api = cluster.api
    _create_group(api, size)
    bodies = gang_workers(size)
    names = [str(b["metadata"]["name"]) for b in bodies]  # type: ignore[index]
    tracker = Tracker(api=api, namespace=NAMESPACE, watch_s=600)
    tracker.start()
    scheduler_before = cpu_s(cluster, VC_SCHEDULER.component)
    create_all(api, NAMESPACE, bodies, tracker)
    wait_bound(tracker, names, stall_s=max(20.0, budget_s / 2), timeout_s=budget_s)
    scheduler_cpu = cpu_s(cluster, VC_SCHEDULER.component) - scheduler_before
    placed = {p["metadata"]["name"]: p["spec"].get("nodeName") for p in list_pods(api, NAMESPACE)}
    on_sample = [n for n in names if placed.get(n) in cluster.sample_names]
    wait_for(
        "gang workers on the sample nodes to run",
        lambda: all(n in tracker.running for n in on_sample),
        timeout_s=120,
        interval_s=0.5,
    )
    tracker.stop()
    first = min(tracker.created.values())
    bound = [n for n in names if n in tracker.bound]
    nan = float("nan")
    run = GangRun(
        size=size,
        bound=len(bound),
        bound_s=max(tracker.bound[n] for n in bound) - first if len(bound) == size else nan,
        create_s=max(tracker.created.values()) - first,
        on_sample=len(on_sample),
        running_s=max(tracker.running[n] for n in on_sample) - first if on_sample else nan,
        nodes=len({placed[n] for n in bound if placed.get(n)}),
        scheduler_cpu_s=scheduler_cpu,
    )
    clean(api)
    _delete_group(api)
    return run
