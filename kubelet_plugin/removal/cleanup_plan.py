"""What `tessera cleanup` removes from a node, decided from the checkpoint and what was found (pure).

A node can be cleaned only when no node plugin serves it any more and no claim is prepared on it: every
checkpoint entry but an interrupted unprepare (`UnprepareStarted`: the kubelet asked, containers are gone) is
a prepared claim, and so is a CDI spec whose marker names a claim the checkpoint lacks (a crash before its
save). Otherwise the plan says, in removal order: the MPS control daemons; the MIG instances Tessera created
for interrupted unprepares (only at placements their records hold: an administrator's instance is never one
of them); MIG mode Tessera switched on, by the MIG family's rule (`dra_driver.core.mig_mode`); then the files
and directories found (`kubelet_plugin.removal.node_survey`), entries before the directories holding them.
What stays and why is said too. `kubelet_plugin.removal.node_sweep` carries a plan out.
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.core import families
from dra_driver.core.families import mig
from dra_driver.core.mig_mode import mig_mode_restore
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind

# What settling the host parts (`NodeState.settle`) takes down, rather than the sweep one by one.
SETTLED_BY_HOSTS = frozenset({LeftoverKind.MIG_INSTANCE, LeftoverKind.MIG_MODE})


@dataclass(frozen=True, slots=True)
class PendingClaim:
    """A claim still prepared on the node: its pod must go (and the kubelet unprepare it) first."""

    namespace: str
    name: str
    uid: ClaimUID

    def __str__(self) -> str:
        who = f"{self.namespace}/{self.name}" if self.name else "a claim whose name is unknown"
        return f"{who} (UID {self.uid})"

    @classmethod
    def of(cls, entry: ClaimEntry) -> PendingClaim:
        return cls(namespace=entry.namespace, name=entry.name, uid=entry.uid)


@dataclass(frozen=True, slots=True)
class NodeSurvey:
    """What of Tessera's the node holds, as found."""

    inventory: Inventory | None  # None: the GPUs could not be read (`inventory_problem` says why)
    unrecorded: tuple[PendingClaim, ...] = ()  # prepared claims known only by their CDI specs' markers
    on_host: tuple[Leftover, ...] = ()  # what the host parts have running (a GPU's MPS control daemon)
    files: tuple[Leftover, ...] = ()  # paths found, in removal order
    inventory_problem: str = ""
    serving: tuple[str, ...] = ()  # DRA sockets another instance of the plugin serves (not this process's)


@dataclass(frozen=True, slots=True)
class CleanupPlan:
    pending: tuple[PendingClaim, ...] = ()  # claims still prepared: nothing may be removed
    serving: tuple[str, ...] = ()  # sockets a node plugin still serves: nothing may be removed either
    unfinished: tuple[PendingClaim, ...] = ()  # interrupted unprepares, to finish first
    leftovers: tuple[Leftover, ...] = ()  # what goes, in order
    kept: tuple[str, ...] = ()  # what stays, and why

    @property
    def blocked(self) -> bool:
        return bool(self.pending or self.serving)

    @property
    def empty(self) -> bool:
        return not (self.pending or self.unfinished or self.leftovers)


def _tessera_instances(entries: tuple[ClaimEntry, ...], inventory: Inventory) -> list[Leftover]:
    """Live instances at the placements interrupted unprepares recorded as Tessera's."""
    out: list[Leftover] = []
    for entry in entries:
        for f in families.placing():
            for placement in f.placements(entry.family_records(f)):
                live = inventory.instance_at(placement)
                if live is not None:
                    out.append(Leftover(LeftoverKind.MIG_INSTANCE, live.uuid))
    return out


def plan_cleanup(cp: Checkpoint, survey: NodeSurvey) -> CleanupPlan:
    entries = tuple(sorted(cp.claims.values(), key=lambda e: e.uid))
    pending = tuple(PendingClaim.of(e) for e in entries if e.state is not ClaimState.UNPREPARE_STARTED)
    pending += tuple(c for c in survey.unrecorded if c.uid not in cp.claims)
    if pending or survey.serving:
        return CleanupPlan(pending=pending, serving=survey.serving)
    leftovers = list(survey.on_host)
    kept: list[str] = []
    owned = cp.owned_by(mig.NAME)
    if survey.inventory is None:
        if owned or entries:
            kept.append(f"MIG instances and MIG mode cannot be told: {survey.inventory_problem}")
    else:
        instances = _tessera_instances(entries, survey.inventory)
        restore = mig_mode_restore(
            owned, in_use=(), inventory=survey.inventory, going={i.target for i in instances}
        )
        leftovers += instances
        leftovers += [Leftover(LeftoverKind.MIG_MODE, g) for g in restore.switch_off]
        kept += [
            f"MIG mode of GPU {g} stays on: Tessera switched it on, but MIG instances it did not create "
            "are on that GPU (an administrator's); switch it off by hand once they are gone"
            for g in sorted(restore.keep)
        ]
    return CleanupPlan(
        unfinished=tuple(PendingClaim.of(e) for e in entries),
        leftovers=(*leftovers, *survey.files),
        kept=tuple(kept),
    )
