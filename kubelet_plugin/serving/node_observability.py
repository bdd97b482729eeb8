"""What the daemon tells about its node besides the slices: usage in claim status (with an API server) and
the metrics endpoint (given an address), both read from what the claims' calls leave behind: the checkpoint
as on disk (prepare changes it under them), the claims' directories and the health poller's latest view;
with the endpoint, the loop that keeps the claims' pods for its labels (`claim_pods`)."""

from __future__ import annotations

import threading
from collections.abc import Callable, Mapping
from typing import Any

import structlog
from prometheus_client import generate_latest

from dra_driver.backends.base import PcieSource
from dra_driver.core.cordon import GpuCordon
from dra_driver.core.families.capacity import SHARES
from dra_driver.core.families.oversubscription import OVERSUBSCRIPTION
from dra_driver.core.settings import NodeSettings
from dra_driver.io.metrics_server import MetricsServer
from dra_driver.vocabulary.errors import StorageError
from kubelet_plugin.claims.api import ApiClaimStatusWriter, ClaimSource, ClaimStatusWriter
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.claims.prepared_claims import PreparedClaim, prepared_claims
from kubelet_plugin.health.service import HealthBoard, InventoryHealthPoller
from kubelet_plugin.metrics import REGISTRY
from kubelet_plugin.node.claim_events import ClaimEvents
from kubelet_plugin.observability.claim_pods import ClaimPods
from kubelet_plugin.observability.node_metrics import NodeMetrics, NodeSources
from kubelet_plugin.observability.paging_watch import PagingWatch
from kubelet_plugin.observability.usage_status import ApiUsageWriter, UsageStatusLoop
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimState
from kubelet_plugin.record.checkpoint_store import checkpoint_stamp
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.serving.options import DaemonOptions

log = structlog.get_logger(__name__)


def scrape(node: NodeMetrics) -> Callable[[], bytes]:
    """What one node's /metrics serves: its scrape-time families, then the daemon's counters."""
    return lambda: node.render() + generate_latest(REGISTRY)


class NodeObservability:
    """The usage loop and the metrics endpoint of one plugin instance, each started only where configured."""

    def __init__(
        self,
        *,
        options: DaemonOptions,
        state: NodeState,
        poller: InventoryHealthPoller,
        board: HealthBoard,
        cordons: Callable[[], Mapping[int, GpuCordon]] = dict,
    ) -> None:
        self.options = options
        self.cordons = cordons
        self.state = state
        self.poller = poller
        self.board = board
        self.usage: UsageStatusLoop | None = None
        self.paging: PagingWatch | None = None
        self.metrics: MetricsServer | None = None
        self.pods: ClaimPods | None = None
        self._refs: tuple[object, tuple[ClaimRef, ...]] | None = None  # checkpoint stamp, its claims
        self._threads: list[threading.Thread] = []

    def start(
        self,
        *,
        status: ClaimStatusWriter,
        api: Any | None,
        settings: NodeSettings,
        healthz: Callable[[], str | None],
        stop: threading.Event,
        pods: tuple[ClaimPods, ClaimSource] | None = None,
        pcie: PcieSource | None = None,
    ) -> None:
        """`pods`: the table the daemon's claim source notes pods into, and the source to read claims
        whose pods it has not seen (without noting twice); `pcie`: where the GPUs' PCIe traffic is read
        (NVML), for the paging watch of a node whose GPUs offer host-backed memory."""
        o = self.options
        if pods is not None:
            self.pods, source = pods
            self._spawn("claim-pods", self.pods.run, self.claim_refs, source, stop)
        if isinstance(status, ApiClaimStatusWriter) and o.usage_status_interval > 0:
            from kubernetes import client as k8s  # noqa: PLC0415

            self.usage = UsageStatusLoop(
                claims=self.prepared,
                writer=ApiUsageWriter(api=k8s.ResourceV1Api(api)),
                interval=o.usage_status_interval,
                pods=self.pods,
            )
            self._spawn("usage-status", self.usage.run, stop)
        if pcie is not None and settings.setting(OVERSUBSCRIPTION) > 1:
            events = ClaimEvents(api=api, node_name=o.node_name) if api is not None else None
            poller = self.poller
            self.paging = PagingWatch(
                source=pcie, inventory=lambda: poller.inventory, claims=self.prepared, events=events
            )
            self._spawn("paging-watch", self.paging.run, stop)
        if o.metrics_address:
            render = scrape(NodeMetrics(self._sources(settings)))
            self.metrics = MetricsServer(address=o.metrics_address, render=render, healthz=healthz)
            self.metrics.start()

    def _spawn(self, name: str, target: Callable[..., None], *args: object) -> None:
        thread = threading.Thread(target=target, args=args, name=name, daemon=True)
        thread.start()
        self._threads.append(thread)

    def _sources(self, settings: NodeSettings) -> NodeSources:
        poller, board, pods = self.poller, self.board, self.pods
        return NodeSources(
            inventory=lambda: poller.inventory,
            checkpoint=self.checkpoint,
            checkpoint_stamp=lambda: checkpoint_stamp(self.state.paths.checkpoint_file),
            claims_dir=self.state.paths.claims_dir,
            health=lambda: board.current,
            conditions=lambda: poller.conditions,
            cordons=self.cordons,
            vgpu_shares=settings.setting(SHARES),
            pods=pods.pods if pods is not None else (lambda _uid: ""),
            pods_version=pods.version if pods is not None else (lambda: 0),
            pcie_busy=self.paging.busy_ratios if self.paging is not None else dict,
        )

    def checkpoint(self) -> Checkpoint | None:
        try:  # from disk: prepare changes it under us
            return self.state.store.load(boot_id="")
        except StorageError as e:
            log.warning("metrics: checkpoint unreadable", error=str(e))
            return None

    def claim_refs(self) -> tuple[ClaimRef, ...]:
        """The prepared claims' names, read again only when the checkpoint changed (the pods loop asks every
        round)."""
        stamp = checkpoint_stamp(self.state.paths.checkpoint_file)
        if self._refs is not None and self._refs[0] == stamp:
            return self._refs[1]
        cp = self.checkpoint()
        if cp is None:
            return self._refs[1] if self._refs is not None else ()
        refs = tuple(
            ClaimRef(e.namespace, e.name, e.uid)
            for e in cp.claims.values()
            if e.state is ClaimState.PREPARE_COMPLETED
        )
        self._refs = (stamp, refs)
        return refs

    def prepared(self) -> tuple[PreparedClaim, ...]:
        inventory = self.poller.inventory
        cp = self.checkpoint()
        if inventory is None or cp is None:
            return ()
        return prepared_claims(cp, inventory, self.state.paths.claims_dir)

    def stop_serving(self) -> None:
        """The endpoint stops answering (first thing at stop)."""
        if self.metrics is not None:
            self.metrics.stop()

    def join(self, timeout: float) -> None:
        for thread in self._threads:
            thread.join(timeout=timeout)
