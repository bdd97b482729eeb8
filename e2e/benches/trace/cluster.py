"""The trace's nodes on the real control plane: a Node object each (its CPU and memory allocatable) whose
pool the node plugin's real publisher writes once, from the bench's process and no daemon
(e2e.benches.trace.publishers). Nothing runs on them: pods are only placed."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.core.slices import build_slices
from dra_driver.io.settings_file import load_settings
from e2e.benches.meters import total_use
from e2e.benches.scale.cluster import list_pools, pool_shape
from e2e.benches.trace.extender import start_extender, with_extender_at
from e2e.benches.trace.publishers import inventory_of, publish_pools
from e2e.benches.trace.records import TraceNode
from e2e.controlplane.binaries import Binaries
from e2e.controlplane.launcher import ControlPlane, start_control_plane
from e2e.controlplane.nodes import create_node
from e2e.controlplane.processes import stop_record
from e2e.controlplane.settings import PRODUCTION
from e2e.controlplane.state import ComponentRecord
from e2e.harness.kube import WaitTimeoutError
from e2e.harness.testbed import make_testbed
from tests.support.loopback import free_port

log = structlog.get_logger(__name__)

LABEL = "tessera.dev/trace"
PODS_PER_NODE = "1000"  # the paper's simulator bounds nothing but CPU, memory and GPUs


@dataclass(slots=True)
class TraceCluster:
    plane: ControlPlane
    api: k8s.ApiClient
    nodes: list[TraceNode]
    publish_s: float = 0.0  # the first pool written → every pool complete
    extender: ComponentRecord | None = None
    extender_port: int | None = None

    def cpu_s(self, component: str) -> float:
        pid = next(c.process.pid for c in self.plane.components if c.name == component)
        return total_use([pid]).cpu_s

    def stop(self) -> None:
        if self.extender is not None:
            stop_record(self.extender, grace_s=5.0)
            self.extender = None
        self.plane.stop()


def _shapes(nodes: Sequence[TraceNode], settings: Path | None) -> dict[str, tuple[int, int]]:
    """Node name → (slices, devices) its complete pool has, computed once per (model, GPUs)."""
    by_kind: dict[tuple[str, int], tuple[int, int]] = {}
    for n in nodes:
        if (n.model, n.gpus) not in by_kind:
            slices = build_slices(inventory_of(n), load_settings(settings, n.name))
            by_kind[(n.model, n.gpus)] = (
                len(slices),
                sum(len(s["spec"].get("devices") or []) for s in slices),
            )
    return {n.name: by_kind[(n.model, n.gpus)] for n in nodes}


def _wait_published(
    cluster: TraceCluster, nodes: Sequence[TraceNode], *, settings: Path | None, timeout_s: float
) -> None:
    shapes = _shapes(nodes, settings)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            pools = list_pools(cluster.api)
        except (ApiException, TransportError) as e:  # a busy API server may cut a long list
            log.warning("trace.list_retry", error=str(e))
            time.sleep(2.0)
            continue
        done = sum(1 for name, shape in shapes.items() if pool_shape(pools.get(name, [])) == shape)
        if done == len(shapes):
            return
        if time.monotonic() > deadline:
            raise WaitTimeoutError(f"{done}/{len(shapes)} trace nodes published within {timeout_s}s")
        time.sleep(2.0)


def _create_nodes(api: k8s.ApiClient, nodes: Sequence[TraceNode]) -> None:
    def create(n: TraceNode) -> None:
        create_node(
            api,
            name=n.name,
            labels={LABEL: "true"},
            cpu=f"{n.cpu_milli}m",
            memory=f"{n.memory_mib}Mi",
            pods=PODS_PER_NODE,
        )

    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(create, nodes))


@contextlib.contextmanager
def trace_cluster(
    *,
    root: Path,
    binaries: Binaries,
    nodes: Sequence[TraceNode],
    settings: Path | None = None,
    scheduler_configuration: Mapping[str, object] | None = None,
    extender: bool = False,
) -> Iterator[TraceCluster]:
    """A fresh control plane (production client rates) with `nodes`, every pool published; `settings` the
    NodeSettings file every node publishes with (None: the defaults), `scheduler_configuration` the
    KubeSchedulerConfiguration kube-scheduler runs with (None: the release's default). With `extender`,
    Tessera's scheduler extender runs beside it on a port of its own, which the configuration's extender
    URLs are pointed at."""
    port = free_port() if extender else None
    if port is not None:
        scheduler_configuration = with_extender_at(scheduler_configuration, port)
    plane = start_control_plane(
        state_dir=root / "controlplane",
        binaries=binaries,
        client_rates=PRODUCTION,
        scheduler_configuration=scheduler_configuration,
    )
    cluster: TraceCluster | None = None
    try:
        api = plane.api_client()
        api.configuration.connection_pool_maxsize = 32
        make_testbed(plane, api)  # the DeviceClasses, the chart's RBAC
        cluster = TraceCluster(plane=plane, api=api, nodes=list(nodes))
        if port is not None:
            cluster.extender = start_extender(plane.kubeconfig, port, root / "logs" / "extender.log")
            cluster.extender_port = port
        _create_nodes(api, nodes)
        started = time.monotonic()
        written = publish_pools(api=api, nodes=nodes, settings=settings)
        _wait_published(cluster, [n for n in nodes if n.gpus], settings=settings, timeout_s=120)
        log.info("trace.published", nodes=len(nodes), slices=written)
        cluster.publish_s = time.monotonic() - started
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        else:
            plane.stop()
