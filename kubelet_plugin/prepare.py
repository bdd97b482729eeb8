"""The prepare/unprepare state machine behind NodePrepareResources / NodeUnprepareResources.

Per call: plan every claim, write all `PrepareStarted` entries in one checkpoint save (with the MIG
placements they intend), create what each claim needs, then record all `PrepareCompleted` entries in a second
save. A claim's failure rolls back only that claim; nothing ever raises out of prepare() or unprepare().
"""

from __future__ import annotations

import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import structlog

from cdi.edits import HostLayout, cdi_ids, claim_spec
from cdi.writer import write_spec
from dra_driver.allocation import ClaimPlan, PlacementKey, VgpuPolicy, plan_claim
from dra_driver.backends.base import GpuBackend
from dra_driver.errors import ClaimError, TesseraError
from dra_driver.excerpt import clip
from dra_driver.model import Inventory, MigInstance
from dra_driver.names import DRIVER_NAME, ClaimUID, DeviceName, GpuUUID
from kubelet_plugin import artifacts
from kubelet_plugin.checkpoint import Checkpoint, ClaimEntry, ClaimState, DeviceRecord
from kubelet_plugin.checkpoint_store import CheckpointStore, read_boot_id
from kubelet_plugin.claim_marker import marker_annotations
from kubelet_plugin.claimdir import ClaimDirs, render_limits
from kubelet_plugin.claims import ClaimSource, ClaimStatusWriter, DeviceStatus
from kubelet_plugin.gpu_sharing import GpuSharing, plan_shares, taken_slots
from kubelet_plugin.paths import PluginPaths
from kubelet_plugin.results import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from kubelet_plugin.steps import NO_OBSERVER, Step, StepObserver

log = structlog.get_logger(__name__)
_IO_THREADS = 8


@dataclass(frozen=True, slots=True)
class _Work:
    ref: ClaimRef
    plan: ClaimPlan
    entry: ClaimEntry  # PrepareStarted, as written ahead
    repair: bool = False  # a prepared claim whose files were damaged: containers may be using it


_Outcome = tuple[ClaimEntry, list[DeviceStatus]] | Exception


def answer(entry: ClaimEntry) -> PrepareResult:
    return PrepareResult(
        devices=tuple(
            PreparedDevice(
                request_names=d.request_names,
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=d.cdi_device_ids,
                share_id=d.share_id,
            )
            for d in entry.devices
        )
    )


def _statuses(plan: ClaimPlan, instances: dict[DeviceName, MigInstance]) -> list[DeviceStatus]:
    """`status.devices` data: which GPU, the limits, and the MIG device UUID."""
    out = []
    for d in plan.devices:
        data: dict[str, object] = {"gpuUUID": d.gpu_uuid}
        if d.limits is not None:
            data["limits"] = {"memory": f"{d.limits.memory_bytes >> 20}Mi", "cores": d.limits.cores}
        if d.mig is not None:
            inst = d.mig.instance or instances.get(d.device)
            data["migUUID"] = inst.uuid if inst else None
        out.append(DeviceStatus(device=d.device, pool=plan.pool, share_id=d.share_id, data=data))
    return out


def _describe(e: Exception) -> str:
    return clip(str(e) if isinstance(e, TesseraError) else f"internal error: {e!r}")


class Preparer:
    """Implements `results.ClaimPreparer`. Calls are serialised by one lock."""

    def __init__(
        self,
        *,
        backend: GpuBackend,
        claims: ClaimSource,
        status: ClaimStatusWriter,
        paths: PluginPaths,
        pool_name: str,
        driver_name: str = DRIVER_NAME,
        steps: StepObserver = NO_OBSERVER,
        driver_library_dirs: Sequence[str] = (),
        boot_id: str | None = None,
        vgpu_policy: VgpuPolicy | None = None,
    ) -> None:
        self.backend = backend
        self.claim_source = claims
        self.status = status
        self.paths = paths
        self.pool_name = pool_name
        self.driver_name = driver_name
        self.steps = steps
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        self.dirs = ClaimDirs(root=paths.claims_dir)
        self.sharing = GpuSharing(gpus_dir=paths.gpus_dir, claims_dir=paths.claims_dir)
        self.lock = threading.RLock()
        self._store = CheckpointStore(path=paths.checkpoint_file)
        self._library_dirs = tuple(driver_library_dirs)
        self._vgpu_policy = vgpu_policy or VgpuPolicy()
        self._cp: Checkpoint | None = None

    # ---- checkpoint ---------------------------------------------------------------------------------

    @property
    def store(self) -> CheckpointStore:
        return self._store

    def checkpoint(self) -> Checkpoint:
        """The current checkpoint (loaded on first use; a corrupt file raises StorageError)."""
        if self._cp is None:
            self._cp = self._store.load(boot_id=self.boot_id)
        return self._cp

    def commit(self, cp: Checkpoint) -> None:
        """Save durably, then adopt: memory never runs ahead of disk."""
        self._store.save(cp)
        self._cp = cp

    def forget_checkpoint(self) -> None:
        self._cp = None

    # ---- prepare ------------------------------------------------------------------------------------

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        with self.dirs.removals_deferred(), self.lock:
            try:
                cp = self.checkpoint()
            except TesseraError as e:
                return {c.uid: PrepareResult(error=str(e)) for c in claims}
            results: dict[ClaimUID, PrepareResult] = {}
            work, snapshot = self._plan_all(claims, cp, results)
            if work and snapshot is not None:
                self._run(work, snapshot, results)
            return results

    def _plan_all(
        self, claims: Sequence[ClaimRef], cp: Checkpoint, results: dict[ClaimUID, PrepareResult]
    ) -> tuple[list[_Work], Inventory | None]:
        work: list[_Work] = []
        snapshot: Inventory | None = None
        batch: set[PlacementKey] = set()
        shared = taken_slots(cp.shares())  # slots on shared GPUs, this call's claims included as planned
        for ref in claims:
            if ref.uid in results or any(w.ref.uid == ref.uid for w in work):
                continue  # the same claim twice in one call gets one answer
            entry = cp.entry(ref.uid)
            repair = False
            if entry is not None and entry.state is ClaimState.PREPARE_COMPLETED:
                damage = artifacts.files_problem(entry, paths=self.paths, dirs=self.dirs)
                if damage is None:
                    results[ref.uid] = answer(entry)
                    continue
                log.warning(
                    "a prepared claim's files are damaged; preparing it again", claim=ref.uid, problem=damage
                )
                repair = True
            try:
                if entry is not None and entry.state is ClaimState.UNPREPARE_STARTED:
                    self._teardown(entry, artifacts.Removed())
                    entry = None
                if snapshot is None:
                    snapshot = self.backend.inventory()
                plan = self._plan(ref, snapshot, cp, entry, frozenset(batch))
                batch |= {m.key for m in plan.mig_placements}
                # a claim prepared again keeps its slots; a new one takes the lowest free on each GPU
                kept = entry.sharing if entry is not None else ()
                sharing = kept or plan_shares(plan, shared)
                for s in sharing:
                    shared.setdefault(s.gpu_uuid, set()).add(s.slot)
                started = ClaimEntry(
                    uid=ref.uid,
                    namespace=ref.namespace,
                    name=ref.name,
                    state=ClaimState.PREPARE_STARTED,
                    mig=artifacts.intended_mig(plan),
                    has_claim_dir=plan.vgpu is not None,
                    sharing=sharing,
                )
                work.append(_Work(ref=ref, plan=plan, entry=started, repair=repair))
            except Exception as e:
                self._log_failure("prepare", ref, e)
                results[ref.uid] = PrepareResult(error=_describe(e))
        return work, snapshot

    def _plan(
        self,
        ref: ClaimRef,
        snapshot: Inventory,
        cp: Checkpoint,
        entry: ClaimEntry | None,
        batch: frozenset[PlacementKey],
    ) -> ClaimPlan:
        claim = self.claim_source.get(namespace=ref.namespace, name=ref.name)
        uid = claim.metadata.uid if claim.metadata else None
        if uid != ref.uid:
            raise ClaimError(
                f"ResourceClaim {ref.namespace}/{ref.name} has UID {uid}, the kubelet asked for {ref.uid}: "
                "the claim was deleted and re-created; the kubelet will retry with the new one"
            )
        return plan_claim(
            claim,
            driver=self.driver_name,
            pool=self.pool_name,
            inventory=snapshot,
            own_placements=artifacts.own_placements(entry),
            tessera_placements=artifacts.tessera_placements(cp, excluding=ref.uid) | batch,
            vgpu_policy=self._vgpu_policy,
        )

    def _run(self, work: list[_Work], snapshot: Inventory, results: dict[ClaimUID, PrepareResult]) -> None:
        cp = self.checkpoint()
        enable = frozenset(g for w in work for g in w.plan.enable_mig_mode)
        # Only MIG state needs writing ahead (to tell Tessera's instances from an admin's after a crash);
        # a crash leaves other claims' CDI specs and claim dirs without an entry, and start-up removes them.
        if enable or any(w.plan.mig_placements for w in work):
            try:
                self.commit(
                    cp.with_entries(w.entry for w in work).with_mig_mode_owned(cp.mig_mode_owned | enable)
                )
            except TesseraError as e:
                for w in work:
                    results[w.ref.uid] = PrepareResult(error=f"checkpoint: {e}")
                return
        for w in work:
            self.steps.reached(Step.AFTER_CHECKPOINT_STARTED, w.ref.uid)
        completed: list[tuple[ClaimEntry, list[DeviceStatus]]] = []
        failed: list[ClaimUID] = []
        for w, outcome in self._materialize_all(work, snapshot):
            if isinstance(outcome, Exception):
                self._log_failure("prepare", w.ref, outcome)
                if w.repair:  # never tear down what running containers use; a retry repairs it
                    results[w.ref.uid] = PrepareResult(
                        error=f"repairing the claim's files: {_describe(outcome)}"
                    )
                else:
                    results[w.ref.uid] = PrepareResult(error=self._roll_back(w, outcome, failed))
            else:
                completed.append(outcome)
        self._finish(completed, failed, results)

    def _materialize_all(self, work: list[_Work], snapshot: Inventory) -> list[tuple[_Work, _Outcome]]:
        """MIG claims one by one (the GPU is one device); the rest in parallel so their fsyncs overlap."""
        owned = self.checkpoint().mig_mode_owned
        out: list[tuple[_Work, _Outcome]] = []
        serial = [w for w in work if w.plan.mig_placements]
        parallel = [w for w in work if not w.plan.mig_placements]
        if len(parallel) < 2:
            serial += parallel
            parallel = []
        for w in serial:
            try:
                out.append((w, self._materialize(w, snapshot, owned)))
            except Exception as e:
                out.append((w, e))
        if parallel:
            with ThreadPoolExecutor(max_workers=min(_IO_THREADS, len(parallel))) as pool:
                futures = [(w, pool.submit(self._materialize, w, snapshot, owned)) for w in parallel]
                for w, future in futures:
                    try:
                        out.append((w, future.result()))
                    except Exception as e:
                        out.append((w, e))
        return out

    def _materialize(
        self, w: _Work, snapshot: Inventory, owned: frozenset[GpuUUID]
    ) -> tuple[ClaimEntry, list[DeviceStatus]]:
        plan, uid = w.plan, w.ref.uid
        instances: dict[DeviceName, MigInstance] = {}
        if plan.mig_placements:
            instances = artifacts.create_mig(
                backend=self.backend, plan=plan, snapshot=snapshot, steps=self.steps
            )
        if plan.vgpu is not None:
            self.sharing.ensure(s.gpu_uuid for s in w.entry.sharing)
            self.dirs.write(uid, limits=render_limits(plan, w.entry.sharing))
            self.steps.reached(Step.AFTER_CLAIMDIR, uid)
        host = HostLayout(
            library_path=str(self.paths.library_path),
            claim_dir=str(self.dirs.path(uid)),
            driver_library_dirs=self._library_dirs,
            gpus_dir=str(self.paths.gpus_dir),
        )
        devices = tuple(
            DeviceRecord(
                request_names=(d.request,),
                pool_name=plan.pool,
                device_name=d.device,
                cdi_device_ids=cdi_ids(plan, d),
                share_id=d.share_id,
            )
            for d in plan.devices
        )
        entry = replace(
            w.entry,
            state=ClaimState.PREPARE_COMPLETED,
            devices=devices,
            mig=artifacts.with_created(w.entry.mig, instances),
        )
        spec = replace(
            claim_spec(plan=plan, inventory=snapshot, host=host, mig_instances=instances),
            annotations=marker_annotations(entry, mig_mode_owned=owned),
        )
        write_spec(self.paths.cdi_dir, uid, spec, fault=self.steps.cdi_write_fault(uid))
        self.steps.reached(Step.AFTER_CDI_WRITE, uid)
        return entry, _statuses(plan, instances)

    def _roll_back(self, w: _Work, cause: Exception, failed: list[ClaimUID]) -> str:
        message = _describe(cause)
        try:
            self._teardown(w.entry, artifacts.Removed())
            failed.append(w.ref.uid)
        except Exception as e:
            # Keep the PrepareStarted entry: unprepare or the next start-up finishes the cleanup.
            log.error("rollback failed", claim=w.ref.uid, error=_describe(e))
            message += f" (rollback incomplete, will be retried: {_describe(e)})"
        return message

    def _finish(
        self,
        completed: list[tuple[ClaimEntry, list[DeviceStatus]]],
        failed: list[ClaimUID],
        results: dict[ClaimUID, PrepareResult],
    ) -> None:
        cp = self.checkpoint().with_entries(e for e, _ in completed)
        if failed:
            try:
                cp = artifacts.settle_mig_mode(
                    cp, backend=self.backend, leaving=failed, removed=artifacts.Removed()
                )
            except TesseraError as e:
                log.error("switching MIG mode back off failed", error=str(e))
        try:
            self.commit(cp.without(failed))
        except TesseraError as e:
            # The artifacts exist and the entries stay PrepareStarted: a retry rolls forward.
            for entry, _ in completed:
                results[entry.uid] = PrepareResult(error=f"checkpoint: {e}")
            return
        # the new claims' parts of their GPUs' frames exist before the kubelet starts their containers
        self.sharing.refresh(self.checkpoint())
        for entry, statuses in completed:
            self.steps.reached(Step.AFTER_CHECKPOINT_COMPLETED, entry.uid)
            results[entry.uid] = answer(entry)
            self._publish_status(entry, statuses)

    def _publish_status(self, entry: ClaimEntry, devices: list[DeviceStatus]) -> None:
        try:
            self.status.publish(
                namespace=entry.namespace,
                name=entry.name,
                uid=entry.uid,
                driver=self.driver_name,
                devices=devices,
            )
        except Exception as e:
            # Status is for humans; a prepared claim stays prepared when the API write fails.
            log.warning("claim status not written", claim=entry.uid, error=_describe(e))

    # ---- unprepare ----------------------------------------------------------------------------------

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]:
        with self.dirs.removals_deferred(), self.lock:
            results = {c.uid: UnprepareResult() for c in claims}  # unknown claims: nothing to undo
            try:
                cp = self.checkpoint()
                known = [
                    e for uid in dict.fromkeys(c.uid for c in claims) if (e := cp.entry(uid)) is not None
                ]
                if not known:
                    return results
                self.commit(cp.with_entries(e.with_state(ClaimState.UNPREPARE_STARTED) for e in known))
            except TesseraError as e:
                return {c.uid: UnprepareResult(error=f"checkpoint: {e}") for c in claims}
            for entry in known:
                self.steps.reached(Step.UNPREPARE_AFTER_CHECKPOINT_STARTED, entry.uid)
            done = self._teardown_all(known, results)
            self._drop(done, results)
            for entry in known:
                if entry.uid in done:
                    self._clear_status(entry)
            return results

    def _teardown(self, entry: ClaimEntry, removed: artifacts.Removed) -> None:
        artifacts.teardown(
            entry, backend=self.backend, paths=self.paths, dirs=self.dirs, steps=self.steps, removed=removed
        )

    def _teardown_all(
        self, entries: list[ClaimEntry], results: dict[ClaimUID, UnprepareResult]
    ) -> set[ClaimUID]:
        done: set[ClaimUID] = set()
        for entry in entries:
            try:
                self._teardown(entry, artifacts.Removed())
                done.add(entry.uid)
            except Exception as e:
                ref = ClaimRef(namespace=entry.namespace, name=entry.name, uid=entry.uid)
                self._log_failure("unprepare", ref, e)
                results[entry.uid] = UnprepareResult(error=_describe(e))
        return done

    def _drop(self, done: set[ClaimUID], results: dict[ClaimUID, UnprepareResult]) -> None:
        cp = self.checkpoint()
        try:
            cp = artifacts.settle_mig_mode(
                cp, backend=self.backend, leaving=done, removed=artifacts.Removed()
            )
            for uid in done:
                self.steps.reached(Step.UNPREPARE_AFTER_MIG_MODE, uid)
            self.commit(cp.without(done))
        except TesseraError as e:
            for uid in done:
                results[uid] = UnprepareResult(error=f"checkpoint: {e}")
            return
        self.sharing.refresh(self.checkpoint())  # the claims left on those GPUs get the freed time
        for uid in done:
            self.steps.reached(Step.UNPREPARE_AFTER_CHECKPOINT_REMOVED, uid)

    def _clear_status(self, entry: ClaimEntry) -> None:
        try:
            self.status.clear(
                namespace=entry.namespace, name=entry.name, uid=entry.uid, driver=self.driver_name
            )
        except Exception as e:
            log.warning("claim status not cleared", claim=entry.uid, error=_describe(e))

    @staticmethod
    def _log_failure(op: str, ref: ClaimRef, e: Exception) -> None:
        if isinstance(e, TesseraError):
            log.warning(f"{op} failed", claim=ref.uid, namespace=ref.namespace, name=ref.name, error=str(e))
        else:
            log.exception(f"{op} failed unexpectedly", claim=ref.uid, namespace=ref.namespace, name=ref.name)
