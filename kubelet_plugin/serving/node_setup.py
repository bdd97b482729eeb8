"""What `tessera plugin` and `tessera cleanup` both run on, built in one place: where claims are read and
their status written (`ClaimAccess`), the GPUs (the backend, NVML from the driver root or the simulated
node), and the node's state over them (its host parts given their flags and the driver root) with the
preparer; and what the host parts' background loops act through in a daemon (`running_on`)."""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from typing import Any, Generic, TypeVar

import structlog

from dra_driver.backends import open_backend
from dra_driver.backends.base import GpuBackend
from dra_driver.core.families.base import NO_SETTINGS, FamilySettings
from dra_driver.io.api_client import api_client
from dra_driver.vocabulary.errors import TesseraError
from kubelet_plugin.claims.api import ApiClaimSource, ApiClaimStatusWriter, ClaimSource, ClaimStatusWriter
from kubelet_plugin.claims.node_state import NodeInputs, NodeState
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.host_parts.base import Running
from kubelet_plugin.node.leader_lock import LeaderLock
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.observability.timed_backend import TimedBackend
from kubelet_plugin.record.checkpoint import Checkpoint
from kubelet_plugin.record.steps import NO_OBSERVER, StepObserver
from kubelet_plugin.serving.driver_setup import driver_setup
from kubelet_plugin.serving.options import DaemonOptions

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ClaimAccess:
    source: ClaimSource
    status: ClaimStatusWriter
    api: Any | None  # kubernetes.client.ApiClient, when an API server is configured


# Where a daemon reads claims and writes their status; a test harness may give its own.
ClaimsFrom = Callable[[DaemonOptions], ClaimAccess]


def claim_access(options: DaemonOptions) -> ClaimAccess:
    """The API server's: claims read and their status written through it."""
    from kubernetes import client as k8s  # noqa: PLC0415

    api = api_client(options.kubeconfig)
    resource = k8s.ResourceV1Api(api)
    return ClaimAccess(ApiClaimSource(api=resource), ApiClaimStatusWriter(api=resource), api)


StateT = TypeVar("StateT", bound=NodeState)


@dataclass(frozen=True, slots=True)
class NodeSetup(Generic[StateT]):
    """The GPUs, the node's state over them, and the preparer over that."""

    backend: GpuBackend
    state: StateT
    preparer: Preparer

    def close(self) -> None:
        """The state's host parts, then the backend (a failure to close it is logged, not raised)."""
        try:
            self.state.close()
        finally:
            close_backend(self.backend)


def close_backend(backend: GpuBackend) -> None:
    try:
        backend.close()
    except TesseraError as e:
        log.warning("closing the GPU backend failed", error=str(e))


def set_up_node(
    options: DaemonOptions,
    *,
    access: ClaimAccess,
    state_type: type[StateT],
    steps: StepObserver = NO_OBSERVER,
    serving: bool = False,
    settings: FamilySettings = NO_SETTINGS,
) -> NodeSetup[StateT]:
    """The node as `options` describe it. `serving`: the daemon's own (GPU health events watched, MIG
    operations timed for /metrics); `tessera cleanup` needs neither. The backend is closed again when the
    state cannot be built."""
    driver = driver_setup(options)
    backend: GpuBackend = open_backend(
        simulate=options.simulate,
        state_file=options.sim_state,
        watch_health=serving,
        nvml_library=driver.nvml_library,
    )
    if serving:
        backend = TimedBackend(backend)
    try:
        inputs = NodeInputs(
            backend=backend,
            paths=options.paths(),
            steps=steps,
            host_options=dict(options.host_options),
            driver_root=driver.root,
        )
        state = state_type(inputs)
    except BaseException:
        close_backend(backend)
        raise
    preparer = Preparer(
        state=state,
        claims=access.source,
        status=access.status,
        pool_name=options.node_name,
        driver_library_dirs=tuple(str(d) for d in options.driver_library_dirs),
        driver_files=driver.files,
        settings=settings,
    )
    return NodeSetup(backend, state, preparer)


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
