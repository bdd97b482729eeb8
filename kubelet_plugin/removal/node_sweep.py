"""Carrying out a cleanup plan (`kubelet_plugin.removal.cleanup_plan`) on the node, through the node daemon's
own code wherever it has some.

Interrupted unprepares are finished by the real unprepare (`Preparer.unprepare`: teardown, MIG mode, the
checkpoint entry); MIG mode left to restore is settled by the MIG host part; what a host part
runs (MPS control daemons) is taken down by that part (`FamilyHost.take_down`); files are removed with the
link-safe `remove_tree`; a directory only when it is empty (one that holds what Tessera did not put there
stays, and a mount point, as the cleanup DaemonSet's host directories are, can only be emptied).

The caller holds the plugin lock: no other instance changes the node meanwhile.
"""

from __future__ import annotations

import errno
import os
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.io.safe_tree import remove_tree
from dra_driver.vocabulary.errors import StorageError, TesseraError
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.removal.cleanup_plan import (
    SETTLED_BY_HOSTS,
    CleanupPlan,
    PendingClaim,
    plan_cleanup,
)
from kubelet_plugin.removal.node_survey import survey_node

log = structlog.get_logger(__name__)
_SHOWN_NAMES = 5


@dataclass(frozen=True, slots=True)
class SweepOutcome:
    pending: tuple[PendingClaim, ...] = ()  # claims still prepared: nothing was removed
    serving: tuple[str, ...] = ()  # sockets a node plugin still serves: nothing was removed
    removed: tuple[str, ...] = ()  # what this sweep removed, one line each (`Leftover`)
    kept: tuple[str, ...] = ()  # what stays, and why
    problems: tuple[str, ...] = ()  # what failed (a later sweep tries again)

    @property
    def clean(self) -> bool:
        return not (self.pending or self.serving or self.problems)


SWEEP_WAIT_S = 120.0


def planned(state: NodeState, *, serving: bool = False) -> CleanupPlan:
    """The plan for the node as it is now (the checkpoint read from disk again)."""
    state.forget()
    cp = state.checkpoint()
    return plan_cleanup(cp, survey_node(state, cp, serving=serving))


def _rmdir(path: Path) -> bool | str:
    """Remove an empty directory: True when it went, False when it was not there, else why it stays."""
    try:
        os.rmdir(path)
    except FileNotFoundError:
        return False
    except OSError as e:
        if e.errno in (errno.ENOTEMPTY, errno.EEXIST):
            names = sorted(os.listdir(path))
            shown = ", ".join(names[:_SHOWN_NAMES]) + (" …" if len(names) > _SHOWN_NAMES else "")
            return f"directory {path} stays: it holds what Tessera did not put there ({shown})"
        if e.errno == errno.EBUSY:
            return f"directory {path} is empty but stays: it is a mount point (remove it on the host)"
        raise StorageError(f"removing directory {path}: {e.strerror or e}") from e
    return True


def release_plugin_dir(plugin_dir: Path, lock_files: Sequence[Path]) -> list[str]:
    """At the end of serving: the plugin's locks and directory, when nothing else is left in it (a plugin
    installed again meanwhile keeps its own)."""
    try:
        names = os.listdir(plugin_dir)
    except FileNotFoundError:
        return []
    if set(names) - {f.name for f in lock_files}:
        return []
    went = [str(Leftover(LeftoverKind.PLUGIN_STATE, str(f))) for f in lock_files if remove_tree(f)]
    if _rmdir(plugin_dir) is True:
        went.append(str(Leftover(LeftoverKind.DIRECTORY, str(plugin_dir))))
    return went


def _carry_out(state: NodeState, item: Leftover) -> bool | str:
    """True: removed; False: already gone; a str: why it stays."""
    for part in state.hosts:
        went = part.take_down(item)
        if went is not None:
            return went
    if item.kind is LeftoverKind.DIRECTORY:
        return _rmdir(Path(item.target))
    return remove_tree(Path(item.target)) > 0


def _finish_unprepares(preparer: Preparer, plan: CleanupPlan) -> list[str]:
    refs = [ClaimRef(namespace=c.namespace, name=c.name, uid=c.uid) for c in plan.unfinished]
    problems = []
    for uid, answer in preparer.unprepare(refs).items():
        if answer.error is not None:
            problems.append(f"finishing the interrupted unprepare of claim {uid}: {answer.error}")
    return problems


def _settle_hosts(state: NodeState) -> list[str]:
    """Node-wide state the host parts restore (MIG mode, ...); a failure, in the host part's own words."""
    try:
        cp, _ = state.settle(state.checkpoint(), leaving=())
        state.commit(cp)
    except TesseraError as e:
        return [str(e)]
    return []


def sweep(preparer: Preparer, *, serving: bool = False) -> SweepOutcome:
    """Remove everything of Tessera's from the node unless a claim is still prepared on it."""
    state = preparer.state
    with state.lock:
        plan = planned(state, serving=serving)
        if plan.blocked:
            return SweepOutcome(pending=plan.pending, serving=plan.serving)
        problems: list[str] = []
        if plan.unfinished:
            problems += _finish_unprepares(preparer, plan)
            plan = planned(state, serving=serving)
            if plan.blocked or plan.unfinished:
                return SweepOutcome(
                    pending=plan.pending,
                    serving=plan.serving,
                    problems=(*problems, "unprepares left unfinished"),
                )
        if any(i.kind in SETTLED_BY_HOSTS for i in plan.leftovers):
            problems += _settle_hosts(state)  # what it takes down is recorded by the state
        # claim directories set aside by the unprepares go in the background: gone before their parent goes
        if not state.dirs.sweeper.wait_idle(timeout=SWEEP_WAIT_S):
            problems.append(f"claim directories still being removed after {SWEEP_WAIT_S:g} s")
        state.hosts.close()  # the GPU views this process maps are removed next
        removed: list[str] = []
        kept = list(plan.kept)
        for item in plan.leftovers:
            if item.kind in SETTLED_BY_HOSTS:
                continue
            try:
                done = _carry_out(state, item)
            except TesseraError as e:
                problems.append(f"{item}: {e}")
                continue
            if isinstance(done, str):
                kept.append(done)
            elif done:
                removed.append(str(item))
                log.debug("removed", what=str(item))
        state.forget()
        return SweepOutcome(removed=tuple(removed), kept=tuple(kept), problems=tuple(problems))
