"""Start-up reconciliation: make the node match the checkpoint and the claims that still exist.

Run once before serving. Whatever belongs to no live prepared claim is removed (CDI specs, claim
directories, MIG instances at placements Tessera recorded, MIG mode Tessera switched on); claims still live
whose preparation was interrupted, or whose files vanished or were damaged (a reboot wipes /var/run/cdi),
are rolled forward. Administrators' MIG instances are never touched: only recorded placements are Tessera's.

An unreadable checkpoint is set aside and rebuilt from the node (`kubelet_plugin.recovery`), never taken
for an empty one; one written by a newer Tessera stops start-up (UnsupportedVersionError) with the node as
it is.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import structlog

from cdi.writer import list_specs, remove_spec, stale_temp_files
from dra_driver.errors import (
    ClaimError,
    ClaimNotFoundError,
    InventoryError,
    StorageError,
    TesseraError,
    UnsupportedVersionError,
)
from dra_driver.model import Inventory
from dra_driver.names import ClaimUID, GpuUUID
from dra_driver.safe_tree import remove_tree
from kubelet_plugin import artifacts
from kubelet_plugin.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.prepare import Preparer
from kubelet_plugin.recovery import Recovery, adopt_marked, rebuild
from kubelet_plugin.results import ClaimRef
from kubelet_plugin.steps import NO_OBSERVER

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
    destroyed_mig_instances: tuple[str, ...]
    disabled_mig_mode: tuple[GpuUUID, ...]
    problems: tuple[str, ...]  # what could not be settled now (left for the next start or call)

    @property
    def checkpoint_set_aside(self) -> str | None:
        return self.recovery.set_aside if self.recovery is not None else None

    @property
    def removed_anything(self) -> bool:
        return bool(
            self.released_claims
            or self.removed_cdi_files
            or self.removed_claim_dirs
            or self.destroyed_mig_instances
            or self.disabled_mig_mode
        )


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


def _is_intact(preparer: Preparer, entry: ClaimEntry, inventory: Inventory | None) -> bool:
    problem = artifacts.files_problem(entry, paths=preparer.paths, dirs=preparer.dirs)
    if problem is not None:
        log.warning(
            "a prepared claim's files are damaged; rolling it forward", claim=entry.uid, problem=problem
        )
        return False
    for record in entry.mig:
        live = artifacts.find_instance(inventory, artifacts.record_key(record)) if inventory else None
        if live is None or (record.uuid is not None and live.uuid != record.uuid):
            return False
    return True


def _load(preparer: Preparer) -> tuple[Checkpoint, Recovery | None]:
    """The checkpoint; an unreadable one is set aside, rebuilt from the node and saved before all else."""
    try:
        return preparer.checkpoint(), None
    except UnsupportedVersionError as e:
        log.error("the checkpoint is of a newer version; not starting", error=str(e))
        raise
    except StorageError as e:
        log.error("checkpoint unreadable; rebuilding it from the node", error=str(e))
        reason = str(e)
    aside = preparer.store.set_aside()
    cp, recovery = rebuild(
        paths=preparer.paths,
        dirs=preparer.dirs,
        backend=preparer.backend,
        boot_id=preparer.boot_id,
        reason=reason,
        set_aside=str(aside),
    )
    preparer.commit(cp)  # first: a crash from here on starts from the rebuilt state, not from nothing
    log.error("checkpoint rebuilt from the node", summary=recovery.summary())
    return cp, recovery


def reconcile(preparer: Preparer, *, roll_forward: bool = True) -> ReconcileReport:
    """Converge the node with the checkpoint and the API; safe to run any number of times."""
    with preparer.dirs.removals_deferred(), preparer.lock:
        cp, recovery = _load(preparer)
        boot_changed = cp.boot_id != preparer.boot_id
        if boot_changed:
            log.info("node rebooted since the checkpoint was written", old=cp.boot_id, new=preparer.boot_id)
        removed = artifacts.Removed()
        problems: list[str] = []
        try:
            inventory: Inventory | None = preparer.backend.inventory()
        except InventoryError as e:  # MIG claims are checked (and rolled forward) when it answers again
            problems.append(f"reading the GPUs: {e}")
            inventory = None
        cp, adopted = adopt_marked(cp, paths=preparer.paths, inventory=inventory)
        released, resume, kept = _settle(preparer, cp, inventory, removed=removed, problems=problems)
        cp = cp.with_entries(replace(e, state=ClaimState.PREPARE_STARTED) for e in resume)
        problems += _remove_orphans(preparer, known=set(cp.claims) - set(released), removed=removed)
        try:
            cp = artifacts.settle_mig_mode(cp, backend=preparer.backend, leaving=released, removed=removed)
        except TesseraError as e:
            problems.append(f"switching MIG mode off: {e}")
        preparer.commit(replace(cp.without(released), boot_id=preparer.boot_id))
        rolled: list[ClaimUID] = []
        if roll_forward and resume:
            refs = [ClaimRef(namespace=e.namespace, name=e.name, uid=e.uid) for e in resume]
            for uid, result in preparer.prepare(refs).items():
                if result.error is None:
                    rolled.append(uid)
                    log.info("rolled claim forward", claim=uid)
                else:
                    problems.append(f"claim {uid}: roll-forward failed, {result.error}")
    report = ReconcileReport(
        boot_changed=boot_changed,
        recovery=recovery,
        adopted_claims=tuple(adopted),
        released_claims=tuple(released),
        rolled_forward=tuple(rolled),
        kept_claims=tuple(kept),
        removed_cdi_files=tuple(removed.cdi_files),
        removed_claim_dirs=tuple(removed.claim_dirs),
        destroyed_mig_instances=tuple(removed.mig_instances),
        disabled_mig_mode=tuple(GpuUUID(g) for g in removed.mig_mode_disabled),
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
        mig_instances=len(report.destroyed_mig_instances),
        problems=list(report.problems),
    )
    return report


def _settle(
    preparer: Preparer,
    cp: Checkpoint,
    inventory: Inventory | None,
    *,
    removed: artifacts.Removed,
    problems: list[str],
) -> tuple[list[ClaimUID], list[ClaimEntry], list[ClaimUID]]:
    """Each entry: released (gone from the API), to resume (unfinished or damaged), or kept."""
    released: list[ClaimUID] = []
    resume: list[ClaimEntry] = []
    kept: list[ClaimUID] = []
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
                artifacts.teardown(
                    entry,
                    backend=preparer.backend,
                    paths=preparer.paths,
                    dirs=preparer.dirs,
                    steps=NO_OBSERVER,
                    removed=removed,
                )
                released.append(entry.uid)
                log.info("released claim", claim=entry.uid, namespace=entry.namespace, name=entry.name)
            except TesseraError as e:
                problems.append(f"claim {entry.uid}: cleanup failed, {e}")
        elif entry.state is ClaimState.PREPARE_STARTED or not _is_intact(preparer, entry, inventory):
            resume.append(entry)
        else:
            kept.append(entry.uid)
    return released, resume, kept


def _remove_orphans(preparer: Preparer, *, known: set[ClaimUID], removed: artifacts.Removed) -> list[str]:
    """Files of claims the checkpoint does not know, and temp files a killed write left; returns problems."""
    problems: list[str] = []
    cdi_dir = preparer.paths.cdi_dir
    try:
        for uid, path in list(list_specs(cdi_dir)):
            if uid not in known and remove_spec(cdi_dir, uid):
                removed.cdi_files.append(str(path))
                log.info("removed orphan CDI spec", path=str(path), claim=uid)
        for path in list(stale_temp_files(cdi_dir)):
            if remove_tree(path):
                log.info("removed stale temp file", path=str(path))
    except StorageError as e:
        problems.append(f"CDI directory cleanup stopped: {e}")
    try:
        for uid in list(preparer.dirs.uids()):
            if uid not in known and preparer.dirs.remove(uid):
                removed.claim_dirs.append(str(preparer.dirs.path(uid)))
                log.info("removed orphan claim directory", claim=uid)
        for path in preparer.dirs.remove_stale_temps():
            log.info("removing stale claim directory", path=str(path))
    except StorageError as e:
        problems.append(f"claim directory cleanup stopped: {e}")
    return problems
