"""Start-up reconciliation: make the node match the checkpoint and the claims that still exist.

Run once before serving. Whatever belongs to no live prepared claim is removed (CDI specs, claim
directories, MIG instances at placements Tessera recorded, MIG mode Tessera switched on); claims still live
whose preparation was interrupted, or whose files vanished or were damaged (a reboot wipes /var/run/cdi),
are rolled forward. Administrators' MIG instances are never touched: only recorded placements are Tessera's.

An unreadable checkpoint is set aside and rebuilt from the node (`kubelet_plugin.claims.recovery`), never
taken for an empty one; one written by a newer Tessera stops start-up (UnsupportedVersionError) with the node
as it is.
"""

from __future__ import annotations

import os
from dataclasses import dataclass, replace
from pathlib import Path

import structlog

from cdi.writer import list_specs, remove_spec, stale_temp_files
from dra_driver.io.files import is_temp
from dra_driver.io.safe_tree import remove_tree
from dra_driver.vocabulary.errors import (
    ClaimError,
    ClaimNotFoundError,
    InventoryError,
    StorageError,
    TesseraError,
    UnsupportedVersionError,
)
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.node_state import NodeState, merged
from kubelet_plugin.claims.prepare import Preparer
from kubelet_plugin.claims.recovery import Recovery, adopt_marked, rebuild
from kubelet_plugin.host_parts.base import Removed
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.record.leftovers import Leftover
from kubelet_plugin.record.results import ClaimRef

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class ReconcileReport:
    boot_changed: bool
    recovery: Recovery | None  # set when the checkpoint was unreadable and rebuilt from the node
    adopted_claims: tuple[ClaimUID, ...]  # prepared claims found by their specs' markers, not the checkpoint
    released_claims: tuple[ClaimUID, ...]  # gone from the API, or unprepare was interrupted
    rolled_forward: tuple[ClaimUID, ...]  # live claims whose preparation was finished again
    kept_claims: tuple[ClaimUID, ...]  # live and complete
    removed_cdi_files: tuple[str, ...]
    removed_claim_dirs: tuple[str, ...]
    # what the host parts took down, each in its own words (MIG instances and mode, MPS daemons, ...)
    removed_on_host: tuple[Leftover, ...]
    problems: tuple[str, ...]  # what could not be settled now (left for the next start or call)

    @property
    def checkpoint_set_aside(self) -> str | None:
        return self.recovery.set_aside if self.recovery is not None else None

    @property
    def removed_anything(self) -> bool:
        return bool(
            self.released_claims or self.removed_cdi_files or self.removed_claim_dirs or self.removed_on_host
        )

    def removed_on_host_of(self, kind: str) -> tuple[str, ...]:
        """The targets of what host parts took down of that kind (`mig-instance`: the instances' UUIDs)."""
        return tuple(w.target for w in self.removed_on_host if w.kind == kind)


def _claim_is_live(preparer: Preparer, entry: ClaimEntry) -> bool:
    """True/False from the API; ClaimError (e.g. the API server is down) propagates: keep, decide later."""
    if not entry.namespace or not entry.name:
        raise ClaimError(
            "its files are kept: which claim owns them is unknown since the checkpoint was rebuilt; the "
            "kubelet's next prepare or unprepare of this UID settles it"
        )
    try:
        claim = preparer.claim_source.get(namespace=entry.namespace, name=entry.name)
    except ClaimNotFoundError:
        return False
    return bool(claim.metadata is not None and claim.metadata.uid == entry.uid)


def _load(state: NodeState) -> tuple[Checkpoint, Recovery | None]:
    """The checkpoint; an unreadable one is set aside, rebuilt from the node and saved before all else."""
    try:
        return state.checkpoint(), None
    except UnsupportedVersionError as e:
        log.error("the checkpoint is of a newer version; not starting", error=str(e))
        raise
    except StorageError as e:
        log.error("checkpoint unreadable; rebuilding it from the node", error=str(e))
        reason = str(e)
    aside = state.store.set_aside()
    cp, recovery = rebuild(state=state, reason=reason, set_aside=str(aside))
    # first, and durably: a crash or a power loss from here on starts from the rebuilt state, not from nothing
    state.commit(cp, durable=True)
    log.error("checkpoint rebuilt from the node", summary=recovery.summary())
    return cp, recovery


@dataclass(frozen=True, slots=True)
class _Settled:
    released: tuple[ClaimUID, ...]  # gone from the API (or unprepare was interrupted): torn down
    resume: tuple[ClaimEntry, ...]  # unfinished or damaged: to roll forward
    kept: tuple[ClaimUID, ...]
    removed: Removed
    problems: tuple[str, ...]


def reconcile(preparer: Preparer, *, roll_forward: bool = True) -> ReconcileReport:
    """Converge the node with the checkpoint and the API; safe to run any number of times."""
    state = preparer.state
    with state.lock:
        cp, recovery = _load(state)
        boot_changed = cp.boot_id != state.boot_id
        if boot_changed:
            log.info("node rebooted since the checkpoint was written", old=cp.boot_id, new=state.boot_id)
        problems: list[str] = []
        try:
            inventory: Inventory | None = state.backend.inventory()
        except InventoryError as e:  # host artifacts are checked (and rolled forward) when it answers again
            problems.append(f"reading the GPUs: {e}")
            inventory = None
        cp, adopted = adopt_marked(cp, state=state, inventory=inventory)
        settled = _settle(preparer, cp, inventory)
        problems += settled.problems
        cp = cp.with_entries(replace(e, state=ClaimState.PREPARE_STARTED) for e in settled.resume)
        orphans, orphan_problems = _remove_orphans(state, known=set(cp.claims) - set(settled.released))
        problems += orphan_problems
        node_wide = Removed()
        try:
            cp, node_wide = state.settle(cp, leaving=settled.released)
        except TesseraError as e:  # the host part's message says what it was undoing
            problems.append(str(e))
        state.commit(replace(cp.without(settled.released), boot_id=state.boot_id))
        rolled: list[ClaimUID] = []
        if roll_forward and settled.resume:
            refs = [ClaimRef(namespace=e.namespace, name=e.name, uid=e.uid) for e in settled.resume]
            for uid, result in preparer.prepare(refs).items():
                if result.error is None:
                    rolled.append(uid)
                    log.info("rolled claim forward", claim=uid)
                else:
                    problems.append(f"claim {uid}: roll-forward failed, {result.error}")
    removed = merged((settled.removed, orphans, node_wide))
    report = ReconcileReport(
        boot_changed=boot_changed,
        recovery=recovery,
        adopted_claims=tuple(adopted),
        released_claims=settled.released,
        rolled_forward=tuple(rolled),
        kept_claims=settled.kept,
        removed_cdi_files=tuple(removed.cdi_files),
        removed_claim_dirs=tuple(removed.claim_dirs),
        removed_on_host=tuple(removed.host),
        problems=tuple(problems),
    )
    log.info(
        "reconciled",
        released=len(report.released_claims),
        rolled_forward=len(report.rolled_forward),
        kept=len(report.kept_claims),
        adopted=len(report.adopted_claims),
        cdi_files=len(report.removed_cdi_files),
        claim_dirs=len(report.removed_claim_dirs),
        host=[str(w) for w in report.removed_on_host],
        problems=list(report.problems),
    )
    return report


def _settle(preparer: Preparer, cp: Checkpoint, inventory: Inventory | None) -> _Settled:
    """Each entry: released (gone from the API), to resume (unfinished or damaged), or kept."""
    state = preparer.state
    released: list[ClaimUID] = []
    resume: list[ClaimEntry] = []
    kept: list[ClaimUID] = []
    removed: list[Removed] = []
    problems: list[str] = []
    for entry in sorted(cp.claims.values(), key=lambda e: e.uid):
        try:
            live = entry.state is not ClaimState.UNPREPARE_STARTED and _claim_is_live(preparer, entry)
        except ClaimError as e:
            who = f"{entry.namespace}/{entry.name} ({entry.uid})" if entry.name else entry.uid
            problems.append(f"claim {who}: kept, {e}")
            kept.append(entry.uid)
            continue
        if not live:
            try:
                removed.append(state.teardown(entry))
                released.append(entry.uid)
                log.info("released claim", claim=entry.uid, namespace=entry.namespace, name=entry.name)
            except TesseraError as e:
                problems.append(f"claim {entry.uid}: cleanup failed, {e}")
            continue
        problem = (
            state.files_problem(entry, inventory=inventory)
            if entry.state is ClaimState.PREPARE_COMPLETED
            else ""
        )
        if problem is None:
            kept.append(entry.uid)
        else:
            if problem:
                log.warning(
                    "a prepared claim's files are damaged; rolling it forward",
                    claim=entry.uid,
                    problem=problem,
                )
            resume.append(entry)
    return _Settled(tuple(released), tuple(resume), tuple(kept), merged(removed), tuple(problems))


def _temps_of(path: Path) -> list[Path]:
    """Temp files in `path`'s directory (a killed write's, or planted under our names)."""
    try:
        return [path.parent / n for n in sorted(os.listdir(path.parent)) if is_temp(n)]
    except FileNotFoundError:
        return []


def _remove_orphans(state: NodeState, *, known: set[ClaimUID]) -> tuple[Removed, list[str]]:
    """Files of claims the checkpoint does not know, and temp files a killed write left."""
    removed = Removed()
    problems: list[str] = []
    cdi_dir = state.paths.cdi_dir
    try:
        for uid, path in list(list_specs(cdi_dir)):
            if uid not in known and remove_spec(cdi_dir, uid):
                removed.cdi_files.append(str(path))
                log.info("removed orphan CDI spec", path=str(path), claim=uid)
        checkpoint = state.paths.checkpoint_file
        ours = [p for p in _temps_of(checkpoint) if p.name.startswith(f".{checkpoint.name}")]
        for path in [*stale_temp_files(cdi_dir), *ours]:
            if remove_tree(path):
                log.info("removed stale temp file", path=str(path))
    except StorageError as e:
        problems.append(f"CDI directory cleanup stopped: {e}")
    try:
        for uid in list(state.dirs.uids()):
            if uid not in known and state.dirs.remove(uid):
                removed.claim_dirs.append(str(state.dirs.path(uid)))
                log.info("removed orphan claim directory", claim=uid)
        for path in state.dirs.remove_stale_temps():
            log.info("removing stale claim directory", path=str(path))
    except StorageError as e:
        problems.append(f"claim directory cleanup stopped: {e}")
    return removed, problems
