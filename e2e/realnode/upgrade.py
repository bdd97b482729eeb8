"""A seamless plugin upgrade on the real node, driven through `helm upgrade` as a user does it: while a stream
of vgpu pods is created and deleted, the chart is upgraded twice — a new image tag, then a settings change —
and each time the DaemonSet (`maxSurge: 1, maxUnavailable: 0`) starts a new pod beside the old one (its own
UID, so its own sockets: `dra-<uid>.sock`, `<driver>-<uid>-reg.sock`), the kubelet registers it beside the
first and sends new calls to it, and only once the new pod is Ready (registered and published: its
readinessProbe) does the old pod go (SIGTERM: it removes its sockets).

What is counted: pods created, before / during / after the switch, that ran and were deleted in time; the
kubelet's own DRA counters (failed PrepareResources / UnprepareResources, gRPC calls that did not end OK); the
plugin instances' per-claim failures in their logs; what is left on the node afterwards.
"""

from __future__ import annotations

import statistics
import threading
import time
from dataclasses import asdict, dataclass, field
from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.harness.kube import WaitTimeoutError, get_pod, is_running, wait_for
from e2e.realnode.chart import PluginPod
from e2e.realnode.metrics import DraCounts
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, probe_pod, vgpu

log = structlog.get_logger(__name__)

TEMPLATE = "upgrade-slice"
PLUGIN_FAILURES = (
    "prepare failed",
    "unprepare failed",
    "prepare failed unexpectedly",
    "unprepare failed unexpectedly",
)


@dataclass(slots=True)
class PodOutcome:
    name: str
    created_at: float  # monotonic
    ran: bool = False
    gone: bool = False
    start_s: float | None = None  # create → Running and Ready
    error: str = ""


@dataclass(frozen=True, slots=True)
class UpgradeFigures:
    pods_created: int
    pods_created_before: int
    pods_created_during_switch: int
    pods_created_after: int
    pods_failed: int  # did not run, or were not finalized by the kubelet, in time
    install_s: float  # `helm install` → the plugin's pod Ready and its pool complete
    first_pod_s: float  # `helm install` → the first GPU pod Running
    switch_s: tuple[float, ...]  # per `helm upgrade`: the command → the old pod gone, a new one Ready
    ready_s: tuple[float, ...]  # per `helm upgrade`: the command → the new pod Ready
    start_p50_s: float
    start_max_s: float
    kubelet_prepares: int
    kubelet_unprepares: int
    kubelet_failed_prepares: int
    kubelet_failed_unprepares: int
    kubelet_grpc_calls: dict[str, int]  # method → calls to Tessera's driver
    kubelet_failed_grpc_calls: int
    plugin_claim_failures: int
    leftovers: tuple[str, ...]
    failures: tuple[str, ...] = field(default=())

    def as_dict(self) -> dict[str, Any]:
        return asdict(self)


class PodStream:
    """`workers` threads, each creating a pod, waiting until the kubelet runs it, deleting it and waiting
    until the kubelet finalized it, over and over until stopped."""

    def __init__(self, node: RealNode, namespace: str, *, workers: int = 3, timeout_s: float = 90.0) -> None:
        self.node = node
        self.namespace = namespace
        self.workers = workers
        self.timeout_s = timeout_s
        self.outcomes: list[PodOutcome] = []
        self._lock = threading.Lock()
        self._stop = threading.Event()
        self._threads: list[threading.Thread] = []
        self._counter = 0

    def start(self) -> None:
        for i in range(self.workers):
            t = threading.Thread(target=self._work, name=f"pod-stream-{i}", daemon=True)
            t.start()
            self._threads.append(t)

    def stop(self) -> None:
        self._stop.set()
        for t in self._threads:
            t.join(timeout=2 * self.timeout_s + 30)

    def finished(self) -> int:
        with self._lock:
            return sum(1 for o in self.outcomes if o.gone)

    def _next_name(self) -> str:
        with self._lock:
            self._counter += 1
            return f"up-{self._counter:03d}"

    def _work(self) -> None:
        core = k8s.CoreV1Api(self.node.api)
        while not self._stop.is_set():
            name = self._next_name()
            manifest = probe_pod(
                name,
                node=self.node.name,
                templates={"gpu": TEMPLATE},
                containers=[ProbeContainer("cuda", ("fill",), claims=("gpu",))],
            )
            outcome = PodOutcome(name=name, created_at=time.monotonic())
            with self._lock:
                self.outcomes.append(outcome)
            try:
                core.create_namespaced_pod(self.namespace, k8s.V1Pod.model_validate(manifest))
                self._run_and_delete(core, outcome)
            except (ApiException, WaitTimeoutError) as e:
                outcome.error = f"{type(e).__name__}: {e}"
                log.warning("upgrade.pod_failed", pod=name, error=outcome.error)
                self._force_delete(core, name)

    def _run_and_delete(self, core: k8s.CoreV1Api, outcome: PodOutcome) -> None:
        ns, name = self.namespace, outcome.name
        wait_for(
            f"{name} to run", lambda: is_running(get_pod(self.node.api, ns, name)), timeout_s=self.timeout_s
        )
        outcome.start_s = time.monotonic() - outcome.created_at
        pod = get_pod(self.node.api, ns, name)
        assert pod is not None
        wait_for(f"{name}'s probe report", lambda: self.node.probe(pod, "cuda"), timeout_s=self.timeout_s)
        outcome.ran = True
        core.delete_namespaced_pod(name, ns)
        wait_for(
            f"{name} to be finalized",
            lambda: get_pod(self.node.api, ns, name) is None,
            timeout_s=self.timeout_s,
        )
        outcome.gone = True

    def _force_delete(self, core: k8s.CoreV1Api, name: str) -> None:
        try:
            core.delete_namespaced_pod(name, self.namespace, grace_period_seconds=0)
        except ApiException as e:
            if e.status != 404:
                log.warning("upgrade.cleanup_failed", pod=name, error=str(e))


def _plugin_failures(pods: list[PluginPod]) -> list[str]:
    return [
        f"{p.uid[:8]}: {e.get('event')} {e.get('claim')}: {e.get('error')}"
        for p in pods
        for e in p.events()
        if e.get("event") in PLUGIN_FAILURES
    ]


NEXT_TAG = "next"  # the image again under a new tag: a release the node has not run yet


def roll(node: RealNode, *set_values: str, image_tag: str | None = None) -> tuple[float, float, PluginPod]:
    """One `helm upgrade`; until the DaemonSet replaced the node's plugin pod. Seconds until the new pod was
    Ready and until the old one was gone, and the new pod."""
    old = node.chart.current
    started = time.monotonic()
    node.chart.upgrade(*set_values, image_tag=image_tag)
    new: PluginPod = wait_for(
        "the new plugin pod to be Ready",
        lambda: next((p for p in node.chart.pods() if p.uid != old.uid and p.ready), None),
        timeout_s=180,
        interval_s=0.2,
    )
    ready = time.monotonic() - started
    wait_for(
        "the old plugin pod to go",
        lambda: all(p.uid != old.uid for p in node.chart.pods()),
        timeout_s=120,
        interval_s=0.2,
    )
    return ready, time.monotonic() - started, new


def run_upgrade(
    node: RealNode, namespace: str, *, workers: int = 3, warmup_pods: int = 4, after_pods: int = 4
) -> UpgradeFigures:
    """Runs the stream, upgrades the release twice in the middle of it (new image tag, then a settings
    change), and counts."""
    template = claim_template(TEMPLATE, vgpu("256Mi", "5"))
    k8s.ResourceV1Api(node.api).create_namespaced_resource_claim_template(
        namespace, k8s.V1ResourceClaimTemplate.model_validate(template)
    )
    pods = [node.chart.current]
    counts_before = node.dra_counts()
    node.tag_image(NEXT_TAG)
    stream = PodStream(node, namespace, workers=workers)
    stream.start()
    switches: list[float] = []
    readies: list[float] = []
    try:
        wait_for("the warm-up pods", lambda: stream.finished() >= warmup_pods, timeout_s=300, interval_s=0.2)
        switch_start = time.monotonic()
        for set_values, tag in (((), NEXT_TAG), (("healthInterval=3",), None)):
            ready_s, switch_s, new = roll(node, *set_values, image_tag=tag)
            readies.append(round(ready_s, 2))
            switches.append(round(switch_s, 2))
            pods.append(new)
        switch_end = time.monotonic()
        done_at_switch = stream.finished()
        wait_for(
            "pods after the switch",
            lambda: stream.finished() >= done_at_switch + after_pods,
            timeout_s=300,
            interval_s=0.2,
        )
    finally:
        stream.stop()
    counts: DraCounts = node.dra_counts() - counts_before
    wait_for("the node to be clean", lambda: not node.leftovers(), timeout_s=60)
    outcomes = stream.outcomes
    failed = [o for o in outcomes if not (o.ran and o.gone)]
    starts = sorted(o.start_s for o in outcomes if o.start_s is not None)
    plugin_failures = _plugin_failures(pods)
    current = pods[-1]
    first = min((o.created_at + o.start_s for o in outcomes if o.start_s is not None), default=0.0)
    figures = UpgradeFigures(
        install_s=round(node.install_s, 2),
        first_pod_s=round(first - node.install_started, 2) if first else 0.0,
        pods_created=len(outcomes),
        pods_created_before=sum(1 for o in outcomes if o.created_at < switch_start),
        pods_created_during_switch=sum(1 for o in outcomes if switch_start <= o.created_at <= switch_end),
        pods_created_after=sum(1 for o in outcomes if o.created_at > switch_end),
        pods_failed=len(failed),
        switch_s=tuple(switches),
        ready_s=tuple(readies),
        start_p50_s=round(statistics.median(starts), 2) if starts else 0.0,
        start_max_s=round(starts[-1], 2) if starts else 0.0,
        kubelet_prepares=counts.operation("PrepareResources", failed=False),
        kubelet_unprepares=counts.operation("UnprepareResources", failed=False),
        kubelet_failed_prepares=counts.operation("PrepareResources", failed=True),
        kubelet_failed_unprepares=counts.operation("UnprepareResources", failed=True),
        kubelet_grpc_calls=counts.grpc_calls(),
        kubelet_failed_grpc_calls=counts.failed_grpc(),
        plugin_claim_failures=len(plugin_failures),
        leftovers=tuple(
            node.leftovers() + [f"socket {p.name}" for p in node.sockets() if current.uid not in p.name]
        ),
        failures=tuple([f"{o.name}: {o.error or 'not finalized'}" for o in failed] + plugin_failures),
    )
    log.info("realnode.upgrade", **figures.as_dict())
    return figures
