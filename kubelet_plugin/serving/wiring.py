"""Assembles a running node plugin from `DaemonOptions`, and takes it apart again.

Order matters. Start: directories (explicit modes), backend, claim source, preparer; reconcile under the
plugin lock (another instance may be serving), removing set-aside claim directories after releasing it, and
the shared GPUs' views rewritten from the checkpoint; the host parts' loops (those writing node-wide files
only while this instance leads, `loops.lock`); health; publisher; then the gRPC servers, the registration
socket last. Stop: the servers first (no new calls, sockets removed), then the loops (the lead given up),
then the backend. A rebuilt checkpoint, or one of a newer version
(start-up refused), is reported in a Warning Event on the Node when an API server is configured.
"""

from __future__ import annotations

import contextlib
import dataclasses
import threading
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import structlog
from prometheus_client import generate_latest

from dra_driver.backends import open_backend
from dra_driver.backends.base import GpuBackend
from dra_driver.core.cluster_features import enforceable_families, server_minor, unenforced_message
from dra_driver.core.families.capacity import SHARES
from dra_driver.core.gpu_health import HealthPolicy
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.core.taints import gpu_taints
from dra_driver.io.api_client import api_client
from dra_driver.io.yaml_files import read_yaml_document
from dra_driver.vocabulary.errors import ConfigError, StorageError, TesseraError, UnsupportedVersionError
from dra_driver.vocabulary.names import Family
from kubelet_plugin.claims.api import ApiClaimSource, ApiClaimStatusWriter, ClaimSource, ClaimStatusWriter
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.claims.prepared_claims import PreparedClaim, prepared_claims
from kubelet_plugin.claims.reconcile import ReconcileReport, reconcile
from kubelet_plugin.health.events import HealthEvents
from kubelet_plugin.health.service import (
    HealthBoard,
    InventoryHealthPoller,
)
from kubelet_plugin.host_parts.base import Running
from kubelet_plugin.metrics import REGISTRY
from kubelet_plugin.node.events import (
    CHECKPOINT_NEWER_REASON,
    CHECKPOINT_REBUILT_REASON,
    SHARING_UNENFORCED_REASON,
    NodeEvents,
)
from kubelet_plugin.node.file_modes import (
    CDI_DIR_MODE,
    CLAIMS_ROOT_MODE,
    PLUGIN_DIR_MODE,
    REGISTRY_DIR_MODE,
    make_dir,
)
from kubelet_plugin.node.foreign_plugin import ForeignPluginGuard
from kubelet_plugin.node.leader_lock import LeaderLock
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.observability.metrics_server import MetricsServer
from kubelet_plugin.observability.node_metrics import NodeMetrics, NodeSources
from kubelet_plugin.observability.timed_backend import TimedBackend
from kubelet_plugin.observability.usage_status import ApiUsageWriter, UsageStatusLoop
from kubelet_plugin.record.checkpoint import Checkpoint, OfferKey
from kubelet_plugin.record.checkpoint_store import checkpoint_stamp
from kubelet_plugin.record.steps import NO_OBSERVER, StepObserver
from kubelet_plugin.serving.dra_service import ClaimCalls
from kubelet_plugin.serving.driver_setup import DriverSetup, driver_setup
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.readiness import Readiness
from kubelet_plugin.serving.server import PluginServer, plugin_services

if TYPE_CHECKING:
    from kubelet_plugin.publish.publisher import SlicePublisher

log = structlog.get_logger(__name__)


def load_settings(path: Path | None, node_name: str) -> NodeSettings:
    if path is None:
        return NodeSettings(node_name=node_name)
    try:
        data = read_yaml_document(path)
    except ConfigError as e:
        raise ConfigError(f"--settings {e}") from e
    if not isinstance(data, dict):
        raise ConfigError(f"--settings {path}: expected a NodeSettings mapping")
    return NodeSettings.from_mapping(data, node_name=node_name)


@dataclass(frozen=True, slots=True)
class ClaimAccess:
    source: ClaimSource
    status: ClaimStatusWriter
    api: Any | None  # kubernetes.client.ApiClient, when an API server is configured


# Where a daemon reads claims and writes their status; a test harness may give its own.
ClaimsFrom = Callable[[DaemonOptions], ClaimAccess]


StateT = TypeVar("StateT", bound=NodeState)


def open_claims(
    options: DaemonOptions,
    *,
    backend: GpuBackend,
    access: ClaimAccess,
    driver: DriverSetup,
    state_type: type[StateT],
    steps: StepObserver = NO_OBSERVER,
) -> tuple[StateT, Preparer]:
    """The node's state (its host parts given their flags and the driver root) and the preparer over it: the
    daemon's and `tessera cleanup`'s."""
    state = state_type(
        backend=backend,
        paths=options.paths(),
        steps=steps,
        host_options=dict(options.host_options),
        driver_root=driver.root,
    )
    preparer = Preparer(
        state=state,
        claims=access.source,
        status=access.status,
        pool_name=options.node_name,
        driver_library_dirs=tuple(str(d) for d in options.driver_library_dirs),
        driver_files=driver.files,
    )
    return state, preparer


def claim_access(options: DaemonOptions) -> ClaimAccess:
    """The API server's: claims read and their status written through it."""
    from kubernetes import client as k8s  # noqa: PLC0415

    api = api_client(options.kubeconfig)
    resource = k8s.ResourceV1Api(api)
    return ClaimAccess(ApiClaimSource(api=resource), ApiClaimStatusWriter(api=resource), api)


def running_on(
    state: NodeState, lock: PluginLock, leader: LeaderLock, *, warn: Callable[..., object] | None = None
) -> Running:
    """What the host parts' loops act through in a daemon: the checkpoint as on disk, the plugin lock with
    the node's, and, for loops writing node-wide files, the lead and the checkpoint lock."""

    def checkpoint() -> Checkpoint | None:
        try:
            return state.latest()  # another instance may have saved since this one's last call
        except TesseraError:
            return None

    @contextlib.contextmanager
    def both_locks() -> Iterator[None]:
        # the file lock too: during a rolling update the other instance's loops and calls wait
        with lock.held(), state.lock:
            state.forget()  # the other instance may have changed the checkpoint
            yield

    return Running(
        checkpoint=checkpoint, exclusive=both_locks, warn=warn, deriving=state.deriving, leads=leader.leads
    )


def scrape(node: NodeMetrics) -> Callable[[], bytes]:
    """What one node's /metrics serves: its scrape-time families, then the daemon's counters."""
    return lambda: node.render() + generate_latest(REGISTRY)


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
        self.backend: GpuBackend | None = None
        self.poller: InventoryHealthPoller | None = None
        self.board: HealthBoard | None = None
        self.server: PluginServer | None = None
        self.publisher: SlicePublisher | None = None
        self._publisher_thread: threading.Thread | None = None
        self.state: NodeState | None = None
        self._loop_threads: list[threading.Thread] = []
        self.leader: LeaderLock | None = None
        self.metrics: MetricsServer | None = None
        self.usage: UsageStatusLoop | None = None
        self.readiness: Readiness | None = None
        self._usage_thread: threading.Thread | None = None
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
        make_dir(paths.plugin_dir, PLUGIN_DIR_MODE)
        make_dir(paths.registry_dir, REGISTRY_DIR_MODE, existing="keep")  # the kubelet's
        make_dir(paths.cdi_dir, CDI_DIR_MODE, existing="tighten")  # shared with other vendors
        make_dir(paths.claims_dir, CLAIMS_ROOT_MODE)
        lock = PluginLock(paths.lock_file)
        driver = driver_setup(o)
        self.backend = backend = TimedBackend(
            open_backend(
                simulate=o.simulate,
                state_file=o.sim_state,
                watch_health=True,
                nvml_library=driver.nvml_library,
            )
        )
        access = self.claims(o)
        events = self._events(access.api)
        self.state, preparer = open_claims(
            o, backend=backend, access=access, driver=driver, state_type=NodeState, steps=self.steps
        )
        state = self.state
        self.readiness = readiness = Readiness(
            paths.ready_file, needs_publish=access.api is not None and o.publish
        )
        with lock.held():
            self._reconcile(preparer, events)  # its commit rewrites what derives from the checkpoint (views)
            state.forget()
        self._start_loops(state, events, lock)

        self.board = board = HealthBoard(pool=o.node_name)
        self.poller = InventoryHealthPoller(
            read=backend.inventory,
            board=board,
            interval=o.health_interval,
            on_change=self._resync,
            policy=HealthPolicy(recover_fatal_xids=o.recover_fatal_xids),
            on_gpu_change=HealthEvents(events),
        )
        self.poller.poll_once()  # the first slices already carry the taints of unhealthy GPUs
        if access.api is not None and o.publish:
            self._start_publisher(access.api, state, settings, readiness, events)
        self.poller.start()
        self._start_observability(access, settings)

        calls = ClaimCalls(
            preparer=preparer,
            lock=lock,
            shared_state=paths.checkpoint_file,
            reload=state.forget,
            after=self._after_claims,
        )
        self.server = PluginServer(
            paths=paths,
            services=plugin_services(
                calls=calls, board=board, dra_socket=paths.dra_socket, on_registration=readiness.registration
            ),
        )
        self.server.start()
        log.info("node plugin running", node=o.node_name, dra_socket=str(paths.dra_socket))

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

    def _checkpoint(self) -> Checkpoint | None:
        if self.state is None:
            return None
        try:  # from disk: prepare changes it under us
            return self.state.store.load(boot_id="")
        except StorageError as e:
            log.warning("metrics: checkpoint unreadable", error=str(e))
            return None

    def _checkpoint_stamp(self) -> object:
        return checkpoint_stamp(self.paths.checkpoint_file)

    def _prepared(self) -> tuple[PreparedClaim, ...]:
        inventory = self.poller.inventory if self.poller is not None else None
        cp = self._checkpoint()
        if inventory is None or cp is None:
            return ()
        return prepared_claims(cp, inventory, self.paths.claims_dir)

    def _start_observability(self, access: ClaimAccess, settings: NodeSettings) -> None:
        """Usage in claim status (with an API server), and the metrics endpoint (when given an address)."""
        o = self.options
        if isinstance(access.status, ApiClaimStatusWriter) and o.usage_status_interval > 0:
            from kubernetes import client as k8s  # noqa: PLC0415

            self.usage = UsageStatusLoop(
                claims=self._prepared,
                writer=ApiUsageWriter(api=k8s.ResourceV1Api(access.api)),
                interval=o.usage_status_interval,
            )
            self._usage_thread = threading.Thread(
                target=self.usage.run, args=(self.stop_event,), name="usage-status", daemon=True
            )
            self._usage_thread.start()
        if not o.metrics_address:
            return
        poller, board, usage = self.poller, self.board, self.usage
        assert poller is not None and board is not None
        sources = NodeSources(
            inventory=lambda: poller.inventory,
            checkpoint=self._checkpoint,
            checkpoint_stamp=self._checkpoint_stamp,
            claims_dir=self.paths.claims_dir,
            health=lambda: board.current,
            conditions=lambda: poller.conditions,
            vgpu_shares=settings.setting(SHARES),
            pods=usage.pods if usage is not None else (lambda _uid: ""),
            pods_version=usage.pods_version if usage is not None else (lambda: 0),
        )
        self.metrics = MetricsServer(
            address=o.metrics_address, render=scrape(NodeMetrics(sources)), healthz=self._healthz
        )
        self.metrics.start()

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

    def _events(self, api: Any | None) -> NodeEvents | None:
        if api is None:
            return None
        from kubernetes import client as k8s  # noqa: PLC0415

        return NodeEvents(core_api=k8s.CoreV1Api(api), node_name=self.options.node_name)

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

    def _start_publisher(
        self,
        api: Any,
        state: NodeState,
        settings: NodeSettings,
        readiness: Readiness,
        events: NodeEvents | None,
    ) -> None:
        from kubernetes import client as k8s  # noqa: PLC0415

        from kubelet_plugin.publish.publisher import SlicePublisher  # noqa: PLC0415 - needs the API client

        settings = self._enforceable(api, settings, events)
        # another GPU device plugin on this node: publish nothing (checked before the first publish)
        guard = ForeignPluginGuard(
            core_api=k8s.CoreV1Api(api),
            node_name=self.options.node_name,
            split=self.options.gpus_split_with_device_plugin,
            events=events,
            on_change=lambda: publisher.request_resync("other-device-plugin"),
        )
        guard.check()

        def desired(degraded: bool) -> Sequence[dict[str, object]]:
            if guard.blocked:
                return ()
            conditions = self.poller.conditions if self.poller is not None else {}
            return build_slices(
                state.backend.inventory(),
                settings,
                owned_placements=state.placements(),
                degraded=degraded,
                taints=gpu_taints(conditions),
                taints_supported=publisher.taints_supported,
            )

        self.publisher = publisher = SlicePublisher(
            api=k8s.ResourceV1Api(api), node_name=self.options.node_name, core_api=k8s.CoreV1Api(api)
        )
        self._publisher_thread = threading.Thread(
            target=publisher.run,
            kwargs={"desired": desired, "stop": self.stop_event, "on_published": readiness.published},
            name="slice-publisher",
            daemon=True,
        )
        self._publisher_thread.start()
        threading.Thread(
            target=guard.run, args=(self.stop_event,), name="other-device-plugin", daemon=True
        ).start()

    @staticmethod
    def _enforceable(api: Any, settings: NodeSettings, events: NodeEvents | None) -> NodeSettings:
        """`settings` less the families the cluster's scheduler cannot keep apart (a Warning Event says
        so). The API server's version stands for the scheduler's (the skew policy allows one older)."""
        from kubernetes import client as k8s  # noqa: PLC0415
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        try:
            git_version = str(k8s.VersionApi(api).get_code().git_version)
        except (ApiException, OSError) as e:
            log.warning("plugin.server_version_unknown", error=str(e))
            return settings
        server = server_minor(git_version)
        if server is None:
            return settings
        offered = enforceable_families(frozenset(settings.families), server)
        if offered == settings.families:
            return settings
        message = unenforced_message(git_version, frozenset(settings.families - offered))
        log.warning("plugin.sharing_unenforced", server=git_version, message=message)
        if events is not None:
            events.warn(reason=SHARING_UNENFORCED_REASON, message=message)
        return dataclasses.replace(settings, families=frozenset(Family(f) for f in offered))

    def stop(self, *, grace: float) -> None:
        self.stop_event.set()
        if self.readiness is not None:
            self.readiness.clear()
        if self.metrics is not None:
            self.metrics.stop()
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
        if self._usage_thread is not None:
            self._usage_thread.join(timeout=5)
        if self.state is not None:
            self.state.close()
        if self.backend is not None:
            try:
                self.backend.close()
            except TesseraError as e:
                log.warning("closing the GPU backend failed", error=str(e))
