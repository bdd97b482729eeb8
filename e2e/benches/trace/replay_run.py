"""One seed's replay on the real control plane: every claim first (an unallocated claim holds nothing), then
the pods in arrival order, one at a time: the Pod is created and the stock kube-scheduler either binds it or
marks it unschedulable, which a watch on the namespace tells as soon as the scheduler says; only then does
the next pod go (each pod is tried once, as the paper's protocol has it). A dropped pod and its claim are
deleted in the background."""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.watch.watch import iter_resp_lines
from urllib3.exceptions import ProtocolError

from dra_driver.core.profiles import GpuProduct
from e2e.benches.trace.cluster import LABEL, TraceCluster
from e2e.benches.trace.kube_objects import claim_object, pod_object
from e2e.benches.trace.records import Ask
from e2e.benches.trace.replay import MARKS, Arrival, Point, curve
from e2e.controlplane.pytest_fixture import wait_for_service_account

log = structlog.get_logger(__name__)

BOUND, UNSCHEDULABLE = "bound", "unschedulable"


@dataclass(slots=True)
class Verdicts:
    """Watches one namespace's pods and keeps each pod's verdict: bound, or unschedulable."""

    api: k8s.ApiClient
    namespace: str
    verdicts: dict[str, str] = field(default_factory=dict)
    _changed: threading.Condition = field(default_factory=threading.Condition)
    _stop: threading.Event = field(default_factory=threading.Event)
    _ready: threading.Event = field(default_factory=threading.Event)
    _version: str | None = None

    def start(self) -> None:
        threading.Thread(target=self._run, daemon=True, name=f"verdicts-{self.namespace}").start()
        self._ready.wait(30)

    def stop(self) -> None:
        self._stop.set()

    @staticmethod
    def verdict(pod: dict[str, Any]) -> str | None:
        if pod.get("spec", {}).get("nodeName"):
            return BOUND
        for c in pod.get("status", {}).get("conditions") or []:
            if (
                c.get("type") == "PodScheduled"
                and c.get("status") == "False"
                and c.get("reason") == "Unschedulable"
            ):
                return UNSCHEDULABLE
        return None

    def _run(self) -> None:
        core = k8s.CoreV1Api(self.api)
        while not self._stop.is_set():
            try:
                response: Any = core.list_namespaced_pod(
                    self.namespace,
                    watch=True,
                    timeout_seconds=120,
                    resource_version=self._version,
                    allow_watch_bookmarks=True,
                    _preload_content=False,
                )
            except ApiException as e:
                log.warning("trace.watch_retry", error=str(e))
                time.sleep(0.5)
                continue
            self._ready.set()
            try:
                self._follow(response)
            except (ProtocolError, OSError) as e:  # the stream broke: the API server stopped, or a blip
                if not self._stop.is_set():
                    log.warning("trace.watch_retry", error=str(e))
                    time.sleep(0.5)
            finally:
                response.release_conn()

    def _follow(self, response: Any) -> None:
        for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
            if not line:
                continue
            event = json.loads(line)
            if event.get("type") == "ERROR":  # e.g. 410 Gone: start over from a fresh list
                self._version = None
                return
            pod = event["object"]
            self._version = pod.get("metadata", {}).get("resourceVersion", self._version)
            name = pod.get("metadata", {}).get("name")
            verdict = self.verdict(pod) if event.get("type") != "BOOKMARK" else None
            if name and verdict:
                with self._changed:
                    self.verdicts.setdefault(name, verdict)
                    self._changed.notify_all()
            if self._stop.is_set():
                return

    def wait(self, name: str, *, timeout_s: float) -> str | None:
        with self._changed:
            self._changed.wait_for(lambda: name in self.verdicts, timeout=timeout_s)
            return self.verdicts.get(name)


@dataclass(frozen=True, slots=True)
class SeedRun:
    seed: int
    outcomes: list[tuple[int, bool]]  # (requested GPU-milli, placed?) in the order tried
    wall_s: float
    scheduler_cpu_s: float
    stuck: int  # pods the scheduler said nothing about within the timeout (counted as not placed)
    claims_s: float = 0.0  # creating every claim, before the first pod (not in wall_s)

    @property
    def placed(self) -> int:
        return sum(1 for _, p in self.outcomes if p)


def _claims(arrivals: Sequence[Arrival]) -> dict[int, str]:
    return {a.index: f"t{a.index:05d}-gpu" for a in arrivals if a.pod.ask is not Ask.CPU}


def _create_claims(
    api: k8s.ApiClient, namespace: str, arrivals: Sequence[Arrival], models: Sequence[GpuProduct]
) -> None:
    """Every claim before the first pod: an unallocated claim holds nothing, and the replay then waits on
    the scheduler alone."""
    resource = k8s.ResourceV1Api(api)
    names = _claims(arrivals)

    def create(a: Arrival) -> None:
        body = claim_object(a.pod, name=names[a.index], models=models)
        resource.create_namespaced_resource_claim(namespace, k8s.ResourceV1ResourceClaim.model_validate(body))

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, [a for a in arrivals if a.index in names]))


class _Dropper:
    """Deletes dropped pods and their claims in the background. That is safe with no departures: what the
    cluster has left only shrinks, so a pod the scheduler found unschedulable stays so until it is gone."""

    def __init__(self, api: k8s.ApiClient, namespace: str) -> None:
        self._core, self._resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
        self._namespace = namespace
        self._pool = ThreadPoolExecutor(max_workers=2)

    def drop(self, pod: str, claim: str | None) -> None:
        self._pool.submit(self._delete, pod, claim)

    def _delete(self, pod: str, claim: str | None) -> None:
        self._core.delete_namespaced_pod(pod, self._namespace, grace_period_seconds=0)
        if claim is not None:
            self._resource.delete_namespaced_resource_claim(claim, self._namespace)

    def close(self) -> None:
        self._pool.shutdown(wait=True)


def _report(
    outcomes: Sequence[tuple[int, bool]],
    *,
    arrived: int,
    cluster_milli: int,
    reported: int,
    on_point: Callable[[Point], None],
) -> int:
    """Hands over the curve's points past the first `reported` (`arrived`: the GPU-milli of `outcomes`);
    how many there are now."""
    if reported >= len(MARKS) or 100 * arrived < MARKS[reported] * cluster_milli:
        return reported  # the common case: no new point, and no curve drawn
    points = curve(outcomes, cluster_milli=cluster_milli)
    for point in points[reported:]:
        on_point(point)
    return len(points)


def replay_seed(
    cluster: TraceCluster,
    arrivals: Sequence[Arrival],
    *,
    seed: int,
    models: Sequence[GpuProduct],
    verdict_timeout_s: float = 120.0,
    progress_every: int = 250,
    cluster_milli: int = 0,
    on_point: Callable[[Point], None] | None = None,
) -> SeedRun:
    """With `on_point` (and the cluster's GPU-milli), each point of the curve is handed over as soon as the
    arrivals reach it, so that a long run shows its figures before it ends."""
    namespace = f"trace-{seed}"
    api = cluster.api
    core = k8s.CoreV1Api(api)
    core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": namespace}}))
    wait_for_service_account(api, namespace)
    claims_started = time.monotonic()
    _create_claims(api, namespace, arrivals, models)
    claims_s = time.monotonic() - claims_started
    claims = _claims(arrivals)
    verdicts = Verdicts(api=api, namespace=namespace)
    verdicts.start()
    dropper = _Dropper(api, namespace)
    outcomes: list[tuple[int, bool]] = []
    stuck = 0
    cpu_before = cluster.cpu_s("kube-scheduler")
    started = time.monotonic()
    reported = arrived = 0
    for a in arrivals:
        name, claim = f"t{a.index:05d}", claims.get(a.index)
        pod = pod_object(a.pod, name=name, claim=claim, node_selector={LABEL: "true"})
        core.create_namespaced_pod(namespace, k8s.V1Pod.model_validate(pod))
        verdict = verdicts.wait(name, timeout_s=verdict_timeout_s)
        if verdict is None:
            stuck += 1
            log.warning("trace.no_verdict", pod=name, trace_pod=a.name)
        if verdict != BOUND:
            dropper.drop(name, claim)
        outcomes.append((a.pod.request_milli, verdict == BOUND))
        arrived += a.pod.request_milli
        if on_point is not None and cluster_milli > 0:
            reported = _report(
                outcomes, arrived=arrived, cluster_milli=cluster_milli, reported=reported, on_point=on_point
            )
        if progress_every and len(outcomes) % progress_every == 0:
            placed = sum(1 for _, p in outcomes if p)
            log.warning(
                "trace.progress",
                seed=seed,
                tried=len(outcomes),
                placed=placed,
                s=round(time.monotonic() - started),
            )
    wall_s = time.monotonic() - started
    scheduler_cpu_s = cluster.cpu_s("kube-scheduler") - cpu_before
    dropper.close()
    verdicts.stop()
    return SeedRun(
        seed=seed,
        outcomes=outcomes,
        wall_s=wall_s,
        scheduler_cpu_s=scheduler_cpu_s,
        stuck=stuck,
        claims_s=claims_s,
    )
