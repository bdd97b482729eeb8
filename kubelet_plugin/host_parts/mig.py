"""The MIG family's host part: MIG mode and MIG instances, created at prepare, destroyed at unprepare.

Only instances at placements the checkpoint records as Tessera's are ever destroyed; an administrator's are
used as they are. MIG mode that Tessera switched on (recorded ahead, `migModeOwned`) is switched off again
once no claim and no instance uses the GPU.
"""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import replace
from typing import Any

import structlog

from dra_driver.core.allocation import ClaimPlan
from dra_driver.core.families.base import PlannedDevice
from dra_driver.core.families.mig import FAMILY, NAME, MigAction, MigPlan, MigRecord
from dra_driver.core.mig_mode import mig_mode_restore
from dra_driver.vocabulary.errors import MigError, TesseraError
from dra_driver.vocabulary.inventory import Inventory, MigInstance
from dra_driver.vocabulary.names import ClaimUID, DeviceName, GpuUUID
from kubelet_plugin.host_parts.base import Created, FamilyHost, HostContext, Removed
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind
from kubelet_plugin.record.steps import Step

log = structlog.get_logger(__name__)


def _records(entry: ClaimEntry) -> tuple[MigRecord, ...]:
    return entry.family_records(FAMILY)


Planned = PlannedDevice[Any, MigPlan]


class MigHost(FamilyHost[MigPlan, MigRecord, MigInstance]):
    def __init__(self, ctx: HostContext) -> None:
        super().__init__(NAME)
        self._ctx = ctx

    def write_ahead(self, devices: Sequence[Planned]) -> bool:
        return bool(devices)  # the placements tell Tessera's instances from an administrator's after a crash

    def will_own(self, devices: Sequence[Planned]) -> frozenset[GpuUUID]:
        return frozenset(d.gpu_uuid for d in devices if d.spec.enable_mig_mode)

    def create(
        self,
        *,
        plan: ClaimPlan,
        devices: Sequence[Planned],
        records: tuple[MigRecord, ...],
        snapshot: Inventory,
    ) -> Created[MigRecord, MigInstance]:
        """Switch MIG mode on where planned, then create (or, rolling forward, reuse) each Tessera
        instance."""
        backend, steps = self._ctx.backend, self._ctx.steps
        for gpu in dict.fromkeys(d.gpu_uuid for d in devices if d.spec.enable_mig_mode):
            backend.set_mig_mode(gpu=gpu, enabled=True)
            log.info("mig mode enabled", gpu=gpu, claim=plan.uid)
            steps.reached(Step.AFTER_MIG_MODE, plan.uid)
        made: dict[DeviceName, MigInstance] = {}
        for d in devices:
            p = d.spec
            live: MigInstance | None = p.instance
            if p.action is MigAction.CREATE:
                live = snapshot.instance_at(p.placement)
                if live is None:
                    live = backend.create_mig_instance(
                        gpu=p.placement.gpu_uuid, profile_id=p.placement.profile_id, start=p.placement.start
                    )
                    log.info(
                        "mig instance created", device=d.device, uuid=live.uuid, gi=live.gi_id, claim=plan.uid
                    )
                    steps.reached(Step.AFTER_MIG_CREATE, plan.uid)
            if live is not None:
                made[d.device] = live
        done = []
        for r in records:
            inst = made.get(DeviceName(r.device))
            done.append(r.with_instance(inst) if inst is not None else r)
        return Created(records=tuple(done), made=made)

    def teardown(self, entry: ClaimEntry) -> Removed:
        removed = Removed()
        tessera = [r for r in _records(entry) if r.created_by_tessera]
        if not tessera:
            return removed
        inventory = self._ctx.backend.inventory()
        for record in tessera:
            live = inventory.instance_at(record.placement)
            if live is not None:
                self._ctx.backend.destroy_mig_instance(gpu=record.placement.gpu_uuid, gi_id=live.gi_id)
                removed.host.append(Leftover(LeftoverKind.MIG_INSTANCE, live.uuid))
                log.info("mig instance destroyed", uuid=live.uuid, gi=live.gi_id, claim=entry.uid)
        self._ctx.steps.reached(Step.UNPREPARE_AFTER_MIG_DESTROY, entry.uid)
        return removed

    def damage(self, entry: ClaimEntry, *, inventory: Inventory | None) -> str | None:
        for record in _records(entry):
            live = inventory.instance_at(record.placement) if inventory is not None else None
            if live is None or (record.uuid is not None and live.uuid != record.uuid):
                return f"MIG instance of {record.device} is gone or was replaced"
        return None

    def recovered(self, entry: ClaimEntry, *, inventory: Inventory) -> tuple[ClaimEntry, frozenset[str]]:
        """Only records whose live instance still has the recorded UUID stay Tessera's; an instance someone
        else made at our old placement is theirs."""
        records: list[MigRecord] = []
        lost: set[str] = set()
        for r in _records(entry):
            live = inventory.instance_at(r.placement)
            if r.created_by_tessera and live is not None and r.uuid not in (None, live.uuid):
                lost.add(live.uuid)
                r = replace(r, created_by_tessera=False)  # noqa: PLW2901
            records.append(r)
        return entry.with_records(NAME, records), frozenset(lost)

    def settle(self, cp: Checkpoint, *, leaving: Collection[ClaimUID]) -> tuple[Checkpoint, Removed]:
        """Switch MIG mode off on GPUs Tessera switched on once no instance and no remaining claim uses
        them; MigError "switching MIG mode off: …" when it cannot."""
        removed = Removed()
        owned = cp.owned_by(NAME)
        if not owned:
            return cp, removed
        in_use = {
            r.placement.gpu_uuid for e in cp.claims.values() if e.uid not in leaving for r in _records(e)
        }
        try:
            restore = mig_mode_restore(owned, in_use=in_use, inventory=self._ctx.backend.inventory())
            for uuid in restore.switch_off:
                self._ctx.backend.set_mig_mode(gpu=uuid, enabled=False)
                removed.host.append(Leftover(LeftoverKind.MIG_MODE, uuid))
                log.info("mig mode disabled after the last Tessera instance", gpu=uuid)
        except TesseraError as e:
            raise MigError(f"switching MIG mode off: {e}") from e
        return cp.with_owned(NAME, restore.keep), removed


def make(ctx: HostContext) -> MigHost:
    return MigHost(ctx)
