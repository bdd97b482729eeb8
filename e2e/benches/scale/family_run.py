"""One family run of the scale benchmark: claims made beforehand, then every pod created at once; the real
kube-scheduler (or Volcano's vc-scheduler: `Scheduler`) places them on the cluster's nodes. Measured: pods
bound per second (first create to last bind), create → bound latency, create → Running on the sample nodes
(the ones with a kubelet), slice writes meanwhile, and the CPU the scheduler, the API server and the
publishers spent."""

from __future__ import annotations

import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.benches.meters import process_use, slice_writes, total_use
from e2e.benches.pods import Tracker, create_all, percentile, pod
from e2e.benches.scale.cluster import LABEL, ScaleCluster
from e2e.benches.scale.workloads import Want
from e2e.harness.kube import list_pods, wait_for

log = structlog.get_logger(__name__)

NAMESPACE = "scale"


@dataclass(frozen=True, slots=True)
class Scheduler:
    """Who places a run's pods: its name in the output, the pods' `schedulerName` (None: the default) and the
    control plane component whose CPU is the scheduler's."""

    name: str
    scheduler_name: str | None
    component: str


KUBE_SCHEDULER = Scheduler("default", None, "kube-scheduler")
# Volcano's controller manager makes each pod a PodGroup of one, as it does for any user's plain pod.
VC_SCHEDULER = Scheduler("volcano", "volcano", "vc-scheduler")
SCHEDULERS = {s.name: s for s in (KUBE_SCHEDULER, VC_SCHEDULER)}


@dataclass(frozen=True, slots=True)
class FamilyRun:
    family: str
    scheduler: str
    pods: int
    bound: int
    pods_per_s: float
    p50_ms: float
    p99_ms: float
    create_s: float  # first create to last create returned
    running: int  # pods on the sample nodes, all run
    run_p50_ms: float
    run_p99_ms: float
    steady_writes: int  # ResourceSlice writes during the run
    scheduler_cpu_s: float
    apiserver_cpu_s: float
    publishers_cpu_s: float


def cpu_s(cluster: ScaleCluster, component: str) -> float:
    pid = next(c.process.pid for c in cluster.plane.components if c.name == component)
    return process_use(pid).cpu_s


def _ms(values: Sequence[float], q: float) -> float:
    return round(percentile(values, q) * 1000, 0) if values else float("nan")


def _create_claims(api: k8s.ApiClient, wants: Sequence[Want], names: Sequence[str]) -> None:
    resource = k8s.ResourceV1Api(api)

    def create(pair: tuple[Want, str]) -> None:
        body = k8s.ResourceV1ResourceClaim.model_validate(pair[0].claim(pair[1], NAMESPACE))
        resource.create_namespaced_resource_claim(NAMESPACE, body)

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, zip(wants, names, strict=True)))


def _until_gone(
    what: str, delete: Callable[[], object], left: Callable[[], bool], *, timeout_s: float
) -> None:
    """Deletes a collection until nothing is left. A busy API server may answer a large delete with a timeout
    (504) part way through; it goes on deleting, so the next try (every 30 s at most) only sweeps up."""
    last = float("-inf")

    def gone() -> bool:
        nonlocal last
        if not left():
            return True
        if time.monotonic() - last >= 30.0:
            last = time.monotonic()
            try:
                delete()
            except ApiException as e:
                if e.status not in (500, 504):
                    raise
                log.warning("scale.delete_timed_out", what=what, status=e.status)
        return False

    wait_for(f"{what} to go", gone, timeout_s=timeout_s, interval_s=1.0)


def clean(api: k8s.ApiClient, *, timeout_s: float = 600.0) -> None:
    """Pods go at once (grace 0: most nodes have no kubelet to finish a graceful deletion; the sample nodes'
    stand-ins unprepare what vanished), then the claims once their pods are gone."""
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    _until_gone(
        "pods",
        lambda: core.delete_collection_namespaced_pod(NAMESPACE, grace_period_seconds=0),
        lambda: bool(core.list_namespaced_pod(NAMESPACE, limit=1).items),
        timeout_s=timeout_s,
    )
    _until_gone(
        "claims",
        lambda: resource.delete_collection_namespaced_resource_claim(NAMESPACE),
        lambda: bool(resource.list_namespaced_resource_claim(NAMESPACE, limit=1).items),
        timeout_s=timeout_s,
    )


def wait_bound(tracker: Tracker, names: Sequence[str], *, stall_s: float, timeout_s: float) -> None:
    """Until every pod is bound, or no pod was bound for `stall_s` (the rest cannot be placed)."""
    deadline = time.monotonic() + timeout_s
    last, last_change = -1, time.monotonic()
    while time.monotonic() < deadline:
        bound = sum(1 for n in names if n in tracker.bound)
        if bound == len(names):
            return
        if bound != last:
            last, last_change = bound, time.monotonic()
        elif time.monotonic() - last_change > stall_s:
            return
        time.sleep(0.2)


def run_family(
    cluster: ScaleCluster,
    family: str,
    wants: Sequence[Want],
    *,
    budget_s: float,
    scheduler: Scheduler = KUBE_SCHEDULER,
) -> FamilyRun:
    """`budget_s`: how long to wait for the binds; pods still pending then are counted as not bound."""
    api = cluster.api
    names = [f"p-{k:05d}" for k in range(len(wants))]
    _create_claims(api, wants, [f"c-{n}" for n in names])
    tracker = Tracker(api=api, namespace=NAMESPACE, watch_s=600)
    tracker.start()
    writes_before = slice_writes(api)
    scheduler_before = cpu_s(cluster, scheduler.component)
    apiserver_before = cpu_s(cluster, "kube-apiserver")
    publishers_before = total_use(cluster.publisher_pids()).cpu_s
    bodies = [pod(n, claim=f"c-{n}", node_selector={LABEL: "true"}) for n in names]
    if scheduler.scheduler_name is not None:
        for body in bodies:
            body["spec"]["schedulerName"] = scheduler.scheduler_name
    create_all(api, NAMESPACE, bodies, tracker)
    wait_bound(tracker, names, stall_s=20.0, timeout_s=budget_s)
    scheduler_cpu = cpu_s(cluster, scheduler.component) - scheduler_before
    apiserver_cpu = cpu_s(cluster, "kube-apiserver") - apiserver_before
    bound = [n for n in names if n in tracker.bound]
    on_sample = [
        p["metadata"]["name"]
        for p in list_pods(api, NAMESPACE)
        if p["spec"].get("nodeName") in cluster.sample_names
    ]
    wait_for(
        "pods on the sample nodes to run",
        lambda: all(n in tracker.running for n in on_sample),
        timeout_s=120,
        interval_s=0.5,
    )
    writes = slice_writes(api) - writes_before
    publishers_cpu = total_use(cluster.publisher_pids()).cpu_s - publishers_before
    tracker.stop()
    first = min(tracker.created.values())
    last_bind = max((tracker.bound[n] for n in bound), default=first)
    latencies = [tracker.bound[n] - tracker.created[n] for n in bound]
    running = [tracker.running[n] - tracker.created[n] for n in on_sample]
    clean(api)
    return FamilyRun(
        family=family,
        scheduler=scheduler.name,
        pods=len(names),
        bound=len(bound),
        pods_per_s=len(bound) / (last_bind - first) if last_bind > first else float("nan"),
        p50_ms=_ms(latencies, 0.5),
        p99_ms=_ms(latencies, 0.99),
        create_s=max(tracker.created.values()) - first,
        running=len(on_sample),
        run_p50_ms=_ms(running, 0.5),
        run_p99_ms=_ms(running, 0.99),
        steady_writes=writes,
        scheduler_cpu_s=scheduler_cpu,
        apiserver_cpu_s=apiserver_cpu,
        publishers_cpu_s=publishers_cpu,
    )
