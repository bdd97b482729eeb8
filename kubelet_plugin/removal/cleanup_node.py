"""A `tessera cleanup` instance serving a node until it is clean (docs/install.md, "Uninstalling").

After `helm uninstall` a deleted pod whose claims are prepared stays Terminating until a plugin of our driver
unprepares them. This instance starts like the node daemon (same options, directories, plugin lock and
start-up reconciliation, without rolling anything forward), registers with the kubelet as the driver's plugin
and publishes no ResourceSlice. It refuses every prepare, claim by claim, and serves unprepares with the node
daemon's own code. As soon as no claim is prepared it removes everything Tessera put on the node
(`node_sweep`), logs one `node clean` event listing what went (through its unprepares too), and writes its
readiness file (`cleanup_marker`). It keeps answering (an unknown claim's unprepare succeeds) until SIGTERM,
then removes its sockets and, when nothing else is left there, the plugin lock and directory.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from pathlib import Path

import structlog

from dra_driver.io.settings_file import load_settings
from dra_driver.vocabulary.errors import ClaimError, TesseraError
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.api import NullClaimStatusWriter
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.claims.reconcile import reconcile
from kubelet_plugin.health.service import HealthBoard
from kubelet_plugin.node.file_modes import PLUGIN_DIR_MODE, REGISTRY_DIR_MODE, make_dir
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.record.results import ClaimRef, PrepareResult, UnprepareResult, unique_claims
from kubelet_plugin.removal.cleanup_marker import clear, mark_clean
from kubelet_plugin.removal.node_survey import holds_claim_state
from kubelet_plugin.removal.node_sweep import SweepOutcome, release_plugin_dir, sweep
from kubelet_plugin.removal.removal_record import RecordedState, distinct, report_lines
from kubelet_plugin.serving.dra_service import ClaimCalls
from kubelet_plugin.serving.node_setup import ClaimAccess, ClaimsFrom, NodeSetup, set_up_node
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.server import PluginServer, plugin_services

log = structlog.get_logger(__name__)
RETRY_S = 30.0  # a sweep that failed, or claims still prepared without a call since: look again this often
TICK_S = 0.5
REMOVAL_MESSAGE = (
    "Tessera is being removed from this node: its cleanup instance serves unprepares only and prepares no "
    "claim; schedule the pod onto another node, or install Tessera on this one again"
)


class UnknownClaims:
    """No API server at hand: whether a claim still exists cannot be told, so reconciliation keeps it."""

    def get(self, *, namespace: str, name: str) -> object:
        raise ClaimError(
            f"whether ResourceClaim {namespace}/{name} still exists cannot be told without an API server "
            "(give --kubeconfig)"
        )


def offline_access(options: DaemonOptions) -> ClaimAccess:
    return ClaimAccess(UnknownClaims(), NullClaimStatusWriter(), None)


class Refusal:
    """The preparer a cleanup instance serves: prepares refused per claim, unprepares the plugin's own."""

    def __init__(self, preparer: Preparer) -> None:
        self._preparer = preparer

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        return {c.uid: PrepareResult(error=REMOVAL_MESSAGE) for c in unique_claims(claims)}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]:
        return self._preparer.unprepare(claims)


def open_node(options: DaemonOptions, *, access: ClaimAccess) -> NodeSetup[RecordedState]:
    """The node as the daemon sets it up (`set_up_node`), its state keeping what it removes."""
    return set_up_node(options, access=access, state_type=RecordedState)


def settle_claims(preparer: Preparer, lock: PluginLock) -> None:
    """Start-up reconciliation as the node daemon does it, rolling nothing forward; only when the node holds
    claim state (a clean node gets no checkpoint written)."""
    state = preparer.state
    assert isinstance(state, RecordedState)
    state.forget()
    if not holds_claim_state(state.paths):
        return
    make_dir(state.paths.plugin_dir, PLUGIN_DIR_MODE)  # the lock's, and where reconciliation saves
    with lock.held():
        state.note(report_lines(reconcile(preparer, roll_forward=False)))
        state.forget()


class CleanupNode:
    def __init__(self, options: DaemonOptions, *, claims: ClaimsFrom, done_file: Path) -> None:
        self.options = options
        self.paths = options.paths()
        self._claims = claims
        self.done_file = done_file
        self.lock = PluginLock(self.paths.lock_file)
        self.setup: NodeSetup[RecordedState] | None = None
        self.state: RecordedState | None = None
        self.preparer: Preparer | None = None
        self.server: PluginServer | None = None
        self.clean = False
        self._called = threading.Event()
        self._waiting_for: tuple[str, ...] = ()

    @classmethod
    def start(cls, options: DaemonOptions, *, claims: ClaimsFrom, done_file: Path) -> CleanupNode:
        node = cls(options, claims=claims, done_file=done_file)
        try:
            node._start()
        except BaseException:
            node.stop(grace=0)
            raise
        return node

    def _start(self) -> None:
        o, paths = self.options, self.paths
        load_settings(o.settings, o.node_name)  # refused as the node daemon refuses it
        clear(self.done_file)
        make_dir(paths.plugin_dir, PLUGIN_DIR_MODE)
        make_dir(paths.registry_dir, REGISTRY_DIR_MODE, existing="keep")  # the kubelet's
        self.setup = open_node(o, access=self._claims(o))
        self.state, self.preparer = self.setup.state, self.setup.preparer
        settle_claims(self.preparer, self.lock)
        calls = ClaimCalls(
            preparer=Refusal(self.preparer),
            lock=self.lock,
            shared_state=paths.checkpoint_file,
            reload=self.state.forget,
            after=self._called.set,
        )
        board = HealthBoard(pool=o.node_name)
        board.post(())  # no devices: nothing is offered here any more
        self.server = PluginServer(
            paths=paths, services=plugin_services(calls=calls, board=board, dra_socket=paths.dra_socket)
        )
        self.server.start()
        log.info("cleanup instance serving", node=o.node_name, dra_socket=str(paths.dra_socket))

    def run_until(self, stop: threading.Event) -> None:
        """Clean the node once nothing is prepared (looked at after each call, and every RETRY_S)."""
        next_try = 0.0
        while not stop.is_set():
            if not self.clean and (self._called.is_set() or time.monotonic() >= next_try):
                self._called.clear()
                next_try = time.monotonic() + RETRY_S
                self.try_clean()
            stop.wait(TICK_S)

    def try_clean(self) -> SweepOutcome | None:
        assert self.state is not None and self.preparer is not None
        try:
            with self.lock.held():
                outcome = sweep(self.preparer, serving=True)
        except Exception:  # a sweep never takes the instance down: it serves unprepares all the same
            log.exception("cleaning the node failed; trying again later", retry_s=RETRY_S)
            return None
        waiting = (*outcome.serving, *(str(c) for c in outcome.pending))
        if waiting and waiting != self._waiting_for:
            log.info(
                "waiting: a node plugin still serves, or the kubelet has claims to unprepare",
                plugins=list(outcome.serving),
                claims=[str(c) for c in outcome.pending],
            )
        self._waiting_for = waiting
        if outcome.problems:
            log.warning("node not clean yet", problems=list(outcome.problems), retry_s=RETRY_S)
        if outcome.clean:
            removed = distinct([*self.state.went, *outcome.removed])
            log.info("node clean", node=self.options.node_name, removed=removed, kept=list(outcome.kept))
            mark_clean(self.done_file, removed=len(removed))
            self.clean = True
        return outcome

    def stop(self, *, grace: float) -> None:
        if self.server is not None:
            self.server.stop(grace=grace)
        if self.clean:
            try:
                went = release_plugin_dir(self.paths.plugin_dir, self.paths.lock_files)
            except TesseraError as e:
                log.warning("the plugin directory was not removed", error=str(e))
            else:
                if went:
                    log.info("removed on stopping", removed=went)
        if self.setup is not None:
            self.setup.close()
