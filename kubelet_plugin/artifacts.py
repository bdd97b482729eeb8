"""What a prepared claim leaves on the node (CDI spec, claim directory, MIG instances, MIG mode), and how
each is created and removed. Shared by prepare, unprepare and start-up reconciliation.
"""

from __future__ import annotations

from collections.abc import Collection, Iterable
from dataclasses import dataclass, field, replace

import structlog

from cdi.writer import read_spec, remove_spec
from dra_driver.allocation import ClaimPlan, MigAction, PlacementKey
from dra_driver.backends.base import GpuBackend
from dra_driver.errors import StorageError
from dra_driver.model import Inventory, MigInstance
from dra_driver.names import LIMITS_FILE_NAME, ClaimUID, DeviceName, GpuUUID
from dra_driver.safe_tree import is_plain_file
from kubelet_plugin.checkpoint import Checkpoint, ClaimEntry, MigRecord
from kubelet_plugin.claimdir import ClaimDirs
from kubelet_plugin.paths import PluginPaths
from kubelet_plugin.steps import Step, StepObserver

log = structlog.get_logger(__name__)


def record_key(record: MigRecord) -> PlacementKey:
    return PlacementKey(gpu_uuid=record.gpu_uuid, profile_id=record.profile_id, start=record.start)


def find_instance(inventory: Inventory, key: PlacementKey) -> MigInstance | None:
    gpu = inventory.gpu_by_uuid(key.gpu_uuid)
    if gpu is None:
        return None
    return next(
        (i for i in gpu.mig_instances if (i.profile_id, i.start) == (key.profile_id, key.start)), None
    )


def own_placements(entry: ClaimEntry | None) -> frozenset[PlacementKey]:
    if entry is None:
        return frozenset()
    return frozenset(record_key(r) for r in entry.mig if r.created_by_tessera)


def tessera_placements(cp: Checkpoint, *, excluding: ClaimUID | None = None) -> frozenset[PlacementKey]:
    return frozenset(record_key(r) for e, r in cp.tessera_mig() if e.uid != excluding)


def intended_mig(plan: ClaimPlan) -> tuple[MigRecord, ...]:
    """The MIG records written ahead of any creation: placements, and the admin instances used as they are."""
    records = []
    for d in plan.devices:
        if d.mig is None:
            continue
        static = d.mig.action is MigAction.STATIC
        records.append(
            MigRecord(
                device=d.device,
                gpu_uuid=d.mig.key.gpu_uuid,
                profile_id=d.mig.key.profile_id,
                profile_name=d.mig.profile_name,
                start=d.mig.key.start,
                created_by_tessera=not static,
                gi_id=d.mig.instance.gi_id if d.mig.instance else None,
                ci_id=d.mig.instance.ci_id if d.mig.instance else None,
                uuid=d.mig.instance.uuid if d.mig.instance else None,
            )
        )
    return tuple(records)


def create_mig(
    *, backend: GpuBackend, plan: ClaimPlan, snapshot: Inventory, steps: StepObserver
) -> dict[DeviceName, MigInstance]:
    """Switch MIG mode on where planned, then create (or, rolling forward, reuse) each Tessera instance."""
    for gpu in plan.enable_mig_mode:
        backend.set_mig_mode(gpu=gpu, enabled=True)
        log.info("mig mode enabled", gpu=gpu, claim=plan.uid)
        steps.reached(Step.AFTER_MIG_MODE, plan.uid)
    instances: dict[DeviceName, MigInstance] = {}
    for d in plan.devices:
        if d.mig is None or d.mig.action is not MigAction.CREATE:
            continue
        live = find_instance(snapshot, d.mig.key)
        if live is None:
            live = backend.create_mig_instance(
                gpu=d.mig.key.gpu_uuid, profile_id=d.mig.key.profile_id, start=d.mig.key.start
            )
            log.info("mig instance created", device=d.device, uuid=live.uuid, gi=live.gi_id, claim=plan.uid)
            steps.reached(Step.AFTER_MIG_CREATE, plan.uid)
        instances[d.device] = live
    return instances


def with_created(
    records: Iterable[MigRecord], instances: dict[DeviceName, MigInstance]
) -> tuple[MigRecord, ...]:
    out = []
    for r in records:
        inst = instances.get(DeviceName(r.device))
        out.append(replace(r, gi_id=inst.gi_id, ci_id=inst.ci_id, uuid=inst.uuid) if inst else r)
    return tuple(out)


def files_problem(entry: ClaimEntry, *, paths: PluginPaths, dirs: ClaimDirs) -> str | None:
    """Why a prepared claim's files cannot be served as they are (None: they can).

    The CDI spec must be a regular file that parses and holds exactly the devices answered to the kubelet;
    a vgpu claim's directory must hold its limits file.
    """
    try:
        spec = read_spec(paths.cdi_spec_file(entry.uid))
    except StorageError as e:
        return str(e)
    answered = {i for d in entry.devices for i in d.cdi_device_ids}
    if set(spec.qualified_names()) != answered:
        return f"CDI spec {paths.cdi_spec_file(entry.uid)} lists other devices than were prepared"
    if entry.has_claim_dir and not is_plain_file(dirs.path(entry.uid) / LIMITS_FILE_NAME):
        return f"claim directory {dirs.path(entry.uid)} or its limits file is missing"
    return None


@dataclass(slots=True)
class Removed:
    """What a teardown removed, for the log and the reconcile report."""

    cdi_files: list[str] = field(default_factory=list)
    claim_dirs: list[str] = field(default_factory=list)
    mig_instances: list[str] = field(default_factory=list)
    mig_mode_disabled: list[str] = field(default_factory=list)


def teardown(
    entry: ClaimEntry,
    *,
    backend: GpuBackend,
    paths: PluginPaths,
    dirs: ClaimDirs,
    steps: StepObserver,
    removed: Removed,
) -> None:
    """Remove everything the entry's claim may have left: CDI spec, Tessera MIG instances, claim dir.

    Idempotent: a thing already gone is skipped. The checkpoint entry itself is the caller's to drop.
    """
    if remove_spec(paths.cdi_dir, entry.uid):
        removed.cdi_files.append(str(paths.cdi_spec_file(entry.uid)))
    steps.reached(Step.UNPREPARE_AFTER_CDI_REMOVE, entry.uid)
    tessera = [r for r in entry.mig if r.created_by_tessera]
    if tessera:
        inventory = backend.inventory()
        for record in tessera:
            live = find_instance(inventory, record_key(record))
            if live is not None:
                backend.destroy_mig_instance(gpu=record.gpu_uuid, gi_id=live.gi_id)
                removed.mig_instances.append(live.uuid)
                log.info("mig instance destroyed", uuid=live.uuid, gi=live.gi_id, claim=entry.uid)
        steps.reached(Step.UNPREPARE_AFTER_MIG_DESTROY, entry.uid)
    if dirs.remove(entry.uid):
        removed.claim_dirs.append(str(dirs.path(entry.uid)))
    steps.reached(Step.UNPREPARE_AFTER_CLAIMDIR_REMOVE, entry.uid)


def settle_mig_mode(
    cp: Checkpoint, *, backend: GpuBackend, leaving: Collection[ClaimUID], removed: Removed
) -> Checkpoint:
    """Switch MIG mode off on GPUs Tessera switched on once no instance and no remaining claim uses them.

    `leaving`: claims about to be dropped from the checkpoint. Returns the checkpoint, owned set updated.
    """
    if not cp.mig_mode_owned:
        return cp
    in_use = {r.gpu_uuid for e in cp.claims.values() if e.uid not in leaving for r in e.mig}
    owned: set[GpuUUID] = set(cp.mig_mode_owned)
    inventory = backend.inventory()
    for uuid in sorted(cp.mig_mode_owned):
        gpu = inventory.gpu_by_uuid(uuid)
        if uuid in in_use or (gpu is not None and gpu.mig_instances):
            continue
        if gpu is not None and gpu.mig_enabled:
            backend.set_mig_mode(gpu=uuid, enabled=False)
            removed.mig_mode_disabled.append(uuid)
            log.info("mig mode disabled after the last Tessera instance", gpu=uuid)
        owned.discard(uuid)
    return cp.with_mig_mode_owned(frozenset(owned))
