"""The prepare/unprepare state machine behind NodePrepareResources / NodeUnprepareResources.

Per call: plan every claim (each device by its family), record the claims `PrepareStarted` with what their
families intend (written ahead where a family needs it: MIG placements and MIG mode), create what each claim
needs through its families' host parts, write its claim directory and CDI spec, then record all claims
`PrepareCompleted` in one save. A claim's failure rolls back only that claim; nothing ever raises out of
prepare() or unprepare(). docs/architecture.md, "The claim life cycle".
"""

from __future__ import annotations

from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace
from typing import Any, TypeVar

import structlog

from cdi.edits import HostLayout, cdi_ids, claim_spec
from cdi.writer import write_spec
from dra_driver.core import families
from dra_driver.core.allocation import ClaimPlan, plan_claim
from dra_driver.core.exclusivity import HeldDevice, check_exclusive
from dra_driver.core.families.base import NO_SETTINGS, FamilySettings
from dra_driver.vocabulary.errors import CheckpointError, ClaimReplacedError, TesseraError
from dra_driver.vocabulary.inventory import NO_DRIVER_FILES, DriverFiles, Inventory
from dra_driver.vocabulary.names import DRIVER_NAME, ClaimUID, DeviceName, Family
from kubelet_plugin.claims.api import ClaimSource, ClaimStatusWriter, DeviceStatus
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.library_files.limits import claim_limits
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState, records_of
from kubelet_plugin.record.claim_marker import marker_annotations
from kubelet_plugin.record.results import (
    ClaimRef,
    PreparedDevice,
    PrepareResult,
    UnprepareResult,
    describe_failure,
    unique_claims,
)
from kubelet_plugin.record.steps import Step

log = structlog.get_logger(__name__)
_IO_THREADS = 8
R = TypeVar("R", PrepareResult, UnprepareResult)


@dataclass(frozen=True, slots=True)
class _Work:
    ref: ClaimRef
    plan: ClaimPlan
    entry: ClaimEntry  # PrepareStarted, with what each family intends
    repair: bool = False  # a prepared claim whose files were damaged: containers may be using it


@dataclass(frozen=True, slots=True)
class _Done:
    entry: ClaimEntry  # PrepareCompleted
    statuses: tuple[DeviceStatus, ...]


def answer(entry: ClaimEntry) -> PrepareResult:
    return PrepareResult(devices=entry.devices)


class Preparer:
    """Implements `results.ClaimPreparer` on the node's state; calls are serialised by the state's lock."""

    def __init__(
        self,
        *,
        state: NodeState,
        claims: ClaimSource,
        status: ClaimStatusWriter,
        pool_name: str,
        driver_name: str = DRIVER_NAME,
        driver_library_dirs: Sequence[str] = (),
        driver_files: DriverFiles = NO_DRIVER_FILES,
        settings: FamilySettings = NO_SETTINGS,
    ) -> None:
        self.state = state
        self.settings = settings  # the node's family settings, which its slices were published with
        self.claim_source = claims
        self.status = status
        self.pool_name = pool_name
        self.driver_name = driver_name
        self._library_dirs = tuple(driver_library_dirs)
        self._driver_files = driver_files

    # ---- prepare ------------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        state = self.state
        with state.lock:
            try:
                state.checkpoint()
            except TesseraError as e:
                return {c.uid: PrepareResult(error=str(e), cause=CheckpointError) for c in claims}
            answers, work, snapshot = self._plan_all(unique_claims(claims))
            if work and snapshot is not None:
                answers.update(self._run(work, snapshot))
            return answers

    def _plan_all(
        self, claims: Sequence[ClaimRef]
    ) -> tuple[dict[ClaimUID, PrepareResult], list[_Work], Inventory | None]:
        answers: dict[ClaimUID, PrepareResult] = {}
        work: list[_Work] = []
        snapshot: Inventory | None = None
        planned: dict[Family, list[object]] = {}  # records of this call's claims, so none is booked twice
        taken: list[HeldDevice] = []  # devices of this call's claims planned so far
        for ref in claims:
            entry = self.state.checkpoint().entry(ref.uid)
            repair = False
            if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
                damage = self.state.files_problem(entry)
                if damage is None:
                    answers[ref.uid] = answer(entry)
                    continue
                log.warning(
                    "a prepared claim's files are damaged; preparing it again", claim=ref.uid, problem=damage
                )
                repair = True
            try:
                if entry is not None and entry.state is ClaimState.UNPREPARE_STARTED:
                    self.state.teardown(entry)
                if snapshot is None:
                    snapshot = self.state.backend.inventory()
                # a claim whose unprepare was interrupted starts afresh; one prepared before keeps its own
                fresh = entry is None or entry.state is ClaimState.UNPREPARE_STARTED
                recorded = self.state.records_by_family(ref.uid, also=planned, own=not fresh)
                plan = plan_claim(
                    self._claim(ref),
                    driver=self.driver_name,
                    pool=self.pool_name,
                    inventory=snapshot,
                    recorded=recorded,
                    settings=self.settings,
                )
                check_exclusive(
                    plan.devices,
                    claim=f"{ref.namespace}/{ref.name}",
                    held=[*self._held(ref.uid), *taken],
                    inventory=snapshot,
                )
                records = {
                    f.name: f.records(plan.of(f.name), recorded.of(f.name))
                    for f in families.recording()
                    if plan.of(f.name)
                }
                for name, recs in records.items():
                    planned.setdefault(name, []).extend(recs)
                started = ClaimEntry(
                    uid=ref.uid,
                    namespace=ref.namespace,
                    name=ref.name,
                    state=ClaimState.PREPARE_STARTED,
                    records=records_of(records),
                    has_claim_dir=plan.library is not None,
                )
                work.append(_Work(ref=ref, plan=plan, entry=started, repair=repair))
                taken.extend(HeldDevice(f"{ref.namespace}/{ref.name}", d.device) for d in plan.devices)
            except Exception as e:
                _log_failure("prepare", ref, e)
                answers[ref.uid] = PrepareResult.failed(e)
        return answers, work, snapshot

    def _held(self, uid: ClaimUID) -> list[HeldDevice]:
        """The devices every other claim in the checkpoint answered with (prepared, or being unprepared)."""
        return [
            HeldDevice(f"{e.namespace}/{e.name}", d.device_name)
            for e in self.state.checkpoint().claims.values()
            if e.uid != uid
            for d in e.devices
        ]

    def _claim(self, ref: ClaimRef) -> Any:  # kubernetes.client.ResourceV1ResourceClaim
        claim = self.claim_source.get(namespace=ref.namespace, name=ref.name)
        uid = claim.metadata.uid if claim.metadata else None
        if uid != ref.uid:
            raise ClaimReplacedError(
                f"ResourceClaim {ref.namespace}/{ref.name} has UID {uid}, the kubelet asked for {ref.uid}: "
                "the claim was deleted and re-created; the kubelet will retry with the new one"
            )
        return claim

    def _write_ahead(self, work: list[_Work]) -> Checkpoint | None:
        """Record the claims PrepareStarted where a family needs it before creating anything; durable when a
        family is about to change node-wide state that outlives a reboot (MIG mode)."""
        cp = self.state.checkpoint()
        needed, owned = False, dict(cp.owned)
        for f in families.FAMILIES:
            host = self.state.hosts[f.name]
            for w in work:
                devices = w.plan.of(f.name)
                if devices and host.write_ahead(devices):
                    needed = True
                    owned[f.name] = owned.get(f.name, frozenset()) | host.will_own(devices)
        if not needed:
            return None
        # a crash from here leaves other claims' specs and claim dirs without an entry: start-up removes them
        changes_node = any(gpus != cp.owned_by(name) for name, gpus in owned.items())
        ahead = cp.with_entries(w.entry for w in work)
        for name, gpus in owned.items():
            ahead = ahead.with_owned(name, gpus)
        return self.state.commit(ahead, durable=changes_node)

    def _run(self, work: list[_Work], snapshot: Inventory) -> dict[ClaimUID, PrepareResult]:
        try:
            self._write_ahead(work)
        except TesseraError as e:
            return {w.ref.uid: _checkpoint_failed(PrepareResult, e) for w in work}
        for w in work:
            self.state.steps.reached(Step.AFTER_CHECKPOINT_STARTED, w.ref.uid)
        answers: dict[ClaimUID, PrepareResult] = {}
        done: list[_Done] = []
        rolled_back: list[ClaimUID] = []
        for w, outcome in self._materialize_all(work, snapshot):
            if isinstance(outcome, _Done):
                done.append(outcome)
                continue
            _log_failure("prepare", w.ref, outcome)
            if w.repair:  # never tear down what running containers use; a retry repairs it
                answers[w.ref.uid] = PrepareResult(
                    error=f"repairing the claim's files: {describe_failure(outcome)}", cause=type(outcome)
                )
                continue
            message, ok = self._roll_back(w, outcome)
            answers[w.ref.uid] = PrepareResult(error=message, cause=type(outcome))
            if ok:
                rolled_back.append(w.ref.uid)
        answers.update(self._finish(done, rolled_back))
        return answers

    def _materialize_all(
        self, work: list[_Work], snapshot: Inventory
    ) -> list[tuple[_Work, _Done | Exception]]:
        """Claims whose families write ahead (MIG: the GPU is one device) one by one; the rest in parallel."""
        hosts = self.state.hosts
        serial = [w for w in work if any(hosts[f].write_ahead(w.plan.of(f)) for f in w.plan.families())]
        parallel = [w for w in work if w not in serial]
        if len(parallel) < 2:
            serial, parallel = serial + parallel, []
        out: list[tuple[_Work, _Done | Exception]] = []
        for w in serial:
            try:
                out.append((w, self._materialize(w, snapshot)))
            except Exception as e:
                out.append((w, e))
        if parallel:
            with ThreadPoolExecutor(max_workers=min(_IO_THREADS, len(parallel))) as pool:
                futures = [(w, pool.submit(self._materialize, w, snapshot)) for w in parallel]
                for w, future in futures:
                    try:
                        out.append((w, future.result()))
                    except Exception as e:
                        out.append((w, e))
        return out

    def _materialize(self, w: _Work, snapshot: Inventory) -> _Done:
        state, plan, uid = self.state, w.plan, w.ref.uid
        made: dict[DeviceName, object] = {}
        records: dict[Family, tuple[object, ...]] = {}
        for f in plan.families():
            created = state.hosts[f].create(
                plan=plan, devices=plan.of(f), records=w.entry.of(f), snapshot=snapshot
            )
            records[f] = created.records
            made.update(created.made)
        limits = claim_limits(plan, records)
        if limits is not None:
            state.dirs.write(uid, limits=limits)
            state.steps.reached(Step.AFTER_CLAIMDIR, uid)
        entry = replace(
            w.entry,
            state=ClaimState.PREPARE_COMPLETED,
            devices=tuple(
                PreparedDevice(
                    request_names=(d.request,),
                    pool_name=plan.pool,
                    device_name=d.device,
                    cdi_device_ids=cdi_ids(plan, d),
                    share_id=d.share_id,
                )
                for d in plan.devices
            ),
            records=records_of(records),
        )
        host = HostLayout(
            library_path=str(state.paths.library_path),
            claim_dir=str(state.dirs.path(uid)),
            driver_library_dirs=self._library_dirs,
            gpus_dir=str(state.paths.gpus_dir),
            driver_files=self._driver_files,
        )
        spec = replace(
            claim_spec(plan=plan, inventory=snapshot, host=host, made=made),
            annotations=marker_annotations(entry, owned=state.checkpoint().owned),
        )
        write_spec(state.paths.cdi_dir, uid, spec, fault=state.steps.cdi_write_fault(uid))
        state.steps.reached(Step.AFTER_CDI_WRITE, uid)
        statuses = tuple(
            DeviceStatus(
                device=d.device,
                pool=plan.pool,
                share_id=d.share_id,
                data={"gpuUUID": d.gpu_uuid, **families.family(d.family).status(d, made.get(d.device))},
            )
            for d in plan.devices
        )
        return _Done(entry=entry, statuses=statuses)

    def _roll_back(self, w: _Work, cause: Exception) -> tuple[str, bool]:
        """The error message, and whether the claim's artifacts are all gone (so its entry can go)."""
        message = describe_failure(cause)
        try:
            self.state.teardown(w.entry)
            return message, True
        except Exception as e:
            # Keep the PrepareStarted entry: unprepare or the next start-up finishes the cleanup.
            log.error("rollback failed", claim=w.ref.uid, error=describe_failure(e))
            return f"{message} (rollback incomplete, will be retried: {describe_failure(e)})", False

    def _finish(self, done: list[_Done], rolled_back: list[ClaimUID]) -> dict[ClaimUID, PrepareResult]:
        state = self.state
        cp = state.checkpoint().with_entries(d.entry for d in done)
        if rolled_back:
            try:
                cp, _ = state.settle(cp, leaving=rolled_back)
            except TesseraError as e:  # the host part's message says what it was undoing
                log.error("settling the node after a rollback failed", error=str(e))
        try:
            state.commit(
                cp.without(rolled_back)
            )  # the new claims' parts of their GPUs' views are written too
        except TesseraError as e:
            # The artifacts exist and the entries stay PrepareStarted: a retry rolls forward.
            return {d.entry.uid: _checkpoint_failed(PrepareResult, e) for d in done}
        for d in done:
            state.steps.reached(Step.AFTER_CHECKPOINT_COMPLETED, d.entry.uid)
            self._publish_status(d)
        return {d.entry.uid: answer(d.entry) for d in done}

    def _publish_status(self, d: _Done) -> None:
        e = d.entry
        try:
            self.status.publish(
                namespace=e.namespace, name=e.name, uid=e.uid, driver=self.driver_name, devices=d.statuses
            )
        except Exception as err:
            # Status is for humans; a prepared claim stays prepared when the API write fails.
            log.warning("claim status not written", claim=e.uid, error=describe_failure(err))

    # ---- unprepare ----------------------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]:
        state = self.state
        with state.lock:
            answers = {c.uid: UnprepareResult() for c in claims}  # unknown claims: nothing to undo
            try:
                cp = state.checkpoint()
                known = [e for c in unique_claims(claims) if (e := cp.entry(c.uid)) is not None]
                if not known:
                    return answers
                state.commit(cp.with_entries(e.with_state(ClaimState.UNPREPARE_STARTED) for e in known))
            except TesseraError as e:
                return {c.uid: _checkpoint_failed(UnprepareResult, e) for c in claims}
            for entry in known:
                state.steps.reached(Step.UNPREPARE_AFTER_CHECKPOINT_STARTED, entry.uid)
            gone: list[ClaimEntry] = []
            for entry in known:
                try:
                    state.teardown(entry)
                    gone.append(entry)
                except Exception as e:
                    _log_failure("unprepare", ClaimRef(entry.namespace, entry.name, entry.uid), e)
                    answers[entry.uid] = UnprepareResult.failed(e)
            answers.update(self._drop([e.uid for e in gone]))
            for entry in gone:
                if answers[entry.uid].error is None:
                    self._clear_status(entry)
            return answers

    def _drop(self, uids: list[ClaimUID]) -> dict[ClaimUID, UnprepareResult]:
        state = self.state
        try:
            cp, _ = state.settle(state.checkpoint(), leaving=uids)
            for uid in uids:
                state.steps.reached(Step.UNPREPARE_AFTER_MIG_MODE, uid)
            state.commit(cp.without(uids))  # the claims left on those GPUs get the freed time
        except TesseraError as e:
            return {uid: _checkpoint_failed(UnprepareResult, e) for uid in uids}
        for uid in uids:
            state.steps.reached(Step.UNPREPARE_AFTER_CHECKPOINT_REMOVED, uid)
        return {}

    def _clear_status(self, entry: ClaimEntry) -> None:
        try:
            self.status.clear(
                namespace=entry.namespace, name=entry.name, uid=entry.uid, driver=self.driver_name
            )
        except Exception as e:
            log.warning("claim status not cleared", claim=entry.uid, error=describe_failure(e))


def _checkpoint_failed(result: type[R], e: TesseraError) -> R:
    """A claim failed where its checkpoint entry is written: counted as a checkpoint failure, whatever
    failed beneath (the store, or settling the node and refreshing views around the save)."""
    return result(error=f"checkpoint: {e}", cause=CheckpointError)


def _log_failure(op: str, ref: ClaimRef, e: Exception) -> None:
    if isinstance(e, TesseraError):
        log.warning(f"{op} failed", claim=ref.uid, namespace=ref.namespace, name=ref.name, error=str(e))
    else:
        log.exception(f"{op} failed unexpectedly", claim=ref.uid, namespace=ref.namespace, name=ref.name)
