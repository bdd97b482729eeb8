"""One running node plugin instance, assembled from `DaemonOptions` and taken apart again: the order of its
parts, which live beside it (`node_setup`: the GPUs and the node's state, shared with `tessera cleanup`;
`slice_publishing` with `version_gate`; `node_observability`; `server`).

Order matters. Start: directories (explicit modes), claim source, backend, preparer; reconcile under the
plugin lock (another instance may be serving), removing set-aside claim directories after releasing it, and
the shared GPUs' views rewritten from the checkpoint; the host parts' loops (those writing node-wide files
only while this instance leads, `loops.lock`); health; publisher; then the gRPC servers, the registration
socket last. Stop: the servers first (no new calls, sockets removed), then the loops (the lead given up),
then the backend. A rebuilt checkpoint, or one of a newer version
(start-up refused), is reported in a Warning Event on the Node when an API server is configured.
"""

from __future__ import annotations

import dataclasses
import threading
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

import structlog

from dra_driver.backends.base import pcie_source
from dra_driver.core.gpu_health import HealthPolicy
from dra_driver.io.settings_file import load_settings
from dra_driver.vocabulary.errors import TesseraError, UnsupportedVersionError
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.claims.reconcile import ReconcileReport, reconcile
from kubelet_plugin.health.events import HealthEvents
from kubelet_plugin.health.service import HealthBoard, InventoryHealthPoller
from kubelet_plugin.node.events import CHECKPOINT_NEWER_REASON, CHECKPOINT_REBUILT_REASON, NodeEvents
from kubelet_plugin.node.file_modes import (
    CDI_DIR_MODE,
    CLAIMS_ROOT_MODE,
    PLUGIN_DIR_MODE,
    REGISTRY_DIR_MODE,
    make_dir,
)
from kubelet_plugin.node.leader_lock import LeaderLock
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.observability.claim_pods import ClaimPods, PodNotingSource
from kubelet_plugin.record.checkpoint import OfferKey
from kubelet_plugin.record.steps import NO_OBSERVER, StepObserver
from kubelet_plugin.serving.dra_service import ClaimCalls
from kubelet_plugin.serving.node_observability import NodeObservability
from kubelet_plugin.serving.node_setup import ClaimsFrom, NodeSetup, claim_access, running_on, set_up_node
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.readiness import Readiness
from kubelet_plugin.serving.server import PluginServer, plugin_services
from kubelet_plugin.serving.slice_publishing import Publishing, start_publishing

if TYPE_CHECKING:
    from kubelet_plugin.publish.publisher import SlicePublisher

log = structlog.get_logger(__name__)


class Node:
    """One running plugin instance."""

    def __init__(
        self, options: DaemonOptions, *, steps: StepObserver = NO_OBSERVER, claims: ClaimsFrom = claim_access
    ) -> None:
        self.options = options
        self.steps = steps
        self.claims = claims
        self.paths = options.paths()
        self.stop_event = threading.Event()
        self.setup: NodeSetup[NodeState] | None = None
        self.state: NodeState | None = None
        self.poller: InventoryHealthPoller | None = None
        self.board: HealthBoard | None = None
        self.server: PluginServer | None = None
        self.publisher: SlicePublisher | None = None
        self._publisher_thread: threading.Thread | None = None
        self._loop_threads: list[threading.Thread] = []
        self._loop_wakes: list[Callable[[], None]] = []  # each loop's `Loop.wake`, called once stopping
        self.leader: LeaderLock | None = None
        self.observability: NodeObservability | None = None
        self.readiness: Readiness | None = None
        self._offered: OfferKey | None = None  # what the node offered after the last claim call

    @classmethod
    def start(
        cls, options: DaemonOptions, *, steps: StepObserver = NO_OBSERVER, claims: ClaimsFrom = claim_access
    ) -> Node:
        node = cls(options, steps=steps, claims=claims)
        try:
            node._start()
        except BaseException:
            node.stop(grace=0)
            raise
        return node

    def _start(self) -> None:
        o, paths = self.options, self.paths
        settings = load_settings(o.settings, o.node_name)
        self._make_dirs()
        lock = PluginLock(paths.lock_file)
        access = self.claims(o)
        pods = ClaimPods() if o.metrics_address else None  # the claims' pods, only for the metrics' labels
        reading = access.source
        if pods is not None:
            access = dataclasses.replace(access, source=PodNotingSource(access.source, pods))
        events = self._events(access.api)
        self.setup = setup = set_up_node(
            o, access=access, state_type=NodeState, steps=self.steps, serving=True, settings=settings.family
        )
        self.state = state = setup.state
        settings.check_fits(setup.backend.inventory())  # e.g. host-backed memory the host cannot hold
        self.readiness = readiness = Readiness(
            paths.ready_file, needs_publish=access.api is not None and o.publish
        )
        with lock.held():
            self._reconcile(setup.preparer, events)  # its commit rewrites what derives from the checkpoint
            state.forget()
        self._start_loops(state, events, lock)
        self.poller = poller = self._start_health(events)
        publishing: Publishing | None = None
        if access.api is not None and o.publish:
            publishing = start_publishing(
                api=access.api,
                options=o,
                state=state,
                settings=settings,
                conditions=lambda: poller.conditions,
                readiness=readiness,
                events=events,
                stop=self.stop_event,
            )
            self.publisher, self._publisher_thread = publishing.publisher, publishing.thread
        poller.start()
        assert self.board is not None
        self.observability = NodeObservability(
            options=o,
            state=state,
            poller=poller,
            board=self.board,
            cordons=publishing.cordons.current if publishing is not None else dict,
        )
        self.observability.start(
            status=access.status,
            api=access.api,
            pods=(pods, reading) if pods is not None else None,
            pcie=pcie_source(setup.backend),
            settings=settings,
            healthz=self._healthz,
            stop=self.stop_event,
        )
        self._serve(setup, lock, readiness)
        log.info("node plugin running", node=o.node_name, dra_socket=str(paths.dra_socket))

    def _make_dirs(self) -> None:
        paths = self.paths
        make_dir(paths.plugin_dir, PLUGIN_DIR_MODE)
        make_dir(paths.registry_dir, REGISTRY_DIR_MODE, existing="keep")  # the kubelet's
        make_dir(paths.cdi_dir, CDI_DIR_MODE, existing="tighten")  # shared with other vendors
        make_dir(paths.claims_dir, CLAIMS_ROOT_MODE)

    def _start_health(self, events: NodeEvents | None) -> InventoryHealthPoller:
        """The GPUs' health, polled once now (the first slices already carry the taints of unhealthy GPUs);
        the caller starts the polling thread."""
        assert self.setup is not None
        self.board = board = HealthBoard(pool=self.options.node_name)
        poller = InventoryHealthPoller(
            read=self.setup.backend.inventory,
            board=board,
            interval=self.options.health_interval,
            on_change=self._resync,
            policy=HealthPolicy(recover_fatal_xids=self.options.recover_fatal_xids),
            on_gpu_change=HealthEvents(events),
        )
        poller.poll_once()
        return poller

    def _serve(self, setup: NodeSetup[NodeState], lock: PluginLock, readiness: Readiness) -> None:
        """The gRPC servers: the DRA service, health, and the registration socket last."""
        paths = self.paths
        calls = ClaimCalls(
            preparer=setup.preparer,
            lock=lock,
            shared_state=paths.checkpoint_file,
            reload=setup.state.forget,
            after=self._after_claims,
        )
        assert self.board is not None
        self.server = PluginServer(
            paths=paths,
            services=plugin_services(
                calls=calls,
                board=self.board,
                dra_socket=paths.dra_socket,
                on_registration=readiness.registration,
            ),
        )
        self.server.start()

    def _resync(self) -> None:
        if self.publisher is not None:
            self.publisher.request_resync()

    def _after_claims(self) -> None:
        """Republish after a claim call only when it changed what the node offers (MIG instances created or
        destroyed, MIG mode switched): rebuilding and listing the pool after every vgpu prepare cost more
        CPU than the prepare itself. Changes made behind Tessera's back wait for the periodic resync."""
        if self.publisher is None or self.state is None:
            return
        try:
            now: OfferKey | None = self.state.offer_key()
        except TesseraError as e:  # cannot tell: republish, and the publisher reports what fails
            log.warning("reading the checkpoint after a claim call failed", error=str(e))
            now = None
        if now is None or now != self._offered:
            self._offered = now
            self._resync()

    def _healthz(self) -> str | None:
        if self.stop_event.is_set():
            return "stopping"
        if self.server is None:
            return "starting"
        return None

    def _start_loops(self, state: NodeState, events: NodeEvents | None, lock: PluginLock) -> None:
        """Every host part's background loops (the MPS watch, the priority relay), one thread each."""
        self.leader = LeaderLock(self.paths.loops_lock_file, what="the loops writing the GPU views")
        running = running_on(state, lock, self.leader, warn=events.warn if events is not None else None)
        for part in state.hosts:
            for loop in part.loops(running):
                thread = threading.Thread(
                    target=loop.run, args=(self.stop_event,), name=loop.name, daemon=True
                )
                thread.start()
                self._loop_threads.append(thread)
                self._loop_wakes.append(loop.wake)

    def _events(self, api: Any | None) -> NodeEvents | None:
        if api is None:
            return None
        from dra_driver.io.rest_calls import RestCalls  # noqa: PLC0415

        return NodeEvents(rest=RestCalls(api), node_name=self.options.node_name)

    @staticmethod
    def _reconcile(preparer: Preparer, events: NodeEvents | None) -> ReconcileReport:
        try:
            report = reconcile(preparer)
        except UnsupportedVersionError as e:
            if events is not None:
                events.warn(reason=CHECKPOINT_NEWER_REASON, message=str(e))
            raise
        if report.recovery is not None and events is not None:
            events.warn(reason=CHECKPOINT_REBUILT_REASON, message=report.recovery.summary())
        return report

    def stop(self, *, grace: float) -> None:
        self.stop_event.set()
        for wake in self._loop_wakes:
            wake()  # a loop asleep until woken sees the stop now
        if self.readiness is not None:
            self.readiness.clear()
        if self.observability is not None:
            self.observability.stop_serving()
        if self.board is not None:
            self.board.close()  # ends the kubelet's health streams
        if self.server is not None:
            self.server.stop(grace=grace)
        if self.poller is not None:
            self.poller.stop()
        if self._publisher_thread is not None:
            self._publisher_thread.join(timeout=grace + 15)  # a watch ends within its timeout
        for thread in self._loop_threads:
            thread.join(timeout=5)
        if self.leader is not None:
            self.leader.close()  # another instance's loops take over
        if self.observability is not None:
            self.observability.join(timeout=5)
        if self.setup is not None:
            self.setup.close()
