"""Rebuilding Tessera's record of prepared claims from the node itself; "unreadable" is never "empty".

When the checkpoint cannot be read (garbage, a cut-off file, a read error), start-up reconciliation calls
`rebuild`: the file has already been set aside, and the new checkpoint holds

- every claim whose CDI spec carries Tessera's marker (`claim_marker`): namespace, name, the answer given,
  the MIG instances Tessera created (kept as Tessera's only while the live instance at that placement still
  has the recorded UUID) and the GPUs whose MIG mode Tessera switched on;
- every other claim that left files (a spec without a readable marker, a claim directory without a spec),
  with its owner unknown: its files are kept, reconciliation reports it at every start, and the kubelet's
  next prepare or unprepare of that UID settles it;

MIG instances no marker accounts for are reported and treated as an administrator's (never destroyed).
Then reconciliation goes on as usual: claims the API server no longer has are released, nothing of a claim
that still exists is removed. `adopt_marked` does the first part on every start, for specs written just
before a crash (or whose checkpoint entry was lost another way).
"""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass, replace

import structlog

from cdi.writer import list_specs, read_spec
from dra_driver.allocation import PlacementKey
from dra_driver.backends.base import GpuBackend
from dra_driver.errors import StorageError
from dra_driver.model import Inventory
from dra_driver.names import ClaimUID, GpuUUID
from kubelet_plugin import artifacts
from kubelet_plugin.checkpoint import Checkpoint, ClaimEntry, ClaimState, MigRecord
from kubelet_plugin.claim_marker import ClaimMarker, parse_marker
from kubelet_plugin.claimdir import ClaimDirs
from kubelet_plugin.paths import PluginPaths

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What a rebuild found; `summary` is what the log and the Node Event say."""

    reason: str  # why the checkpoint could not be read
    set_aside: str  # where the unreadable file now is
    rebuilt: tuple[ClaimUID, ...]  # claims recovered from their specs' markers
    unattributed: tuple[ClaimUID, ...]  # files kept whose claim is unknown
    unaccounted_mig: tuple[str, ...]  # MIG instances treated as an administrator's
    mig_mode_owned: tuple[GpuUUID, ...]

    def summary(self) -> str:
        parts = [
            f"the checkpoint could not be read ({self.reason}); it was moved to {self.set_aside} and "
            f"rebuilt from the node: {len(self.rebuilt)} prepared claim(s) recovered from their CDI specs"
        ]
        if self.unattributed:
            shown = ", ".join(self.unattributed[:5]) + (" …" if len(self.unattributed) > 5 else "")
            parts.append(
                f"files of {len(self.unattributed)} claim(s) whose owner is unknown are kept until the "
                f"kubelet prepares or unprepares them ({shown})"
            )
        if self.unaccounted_mig:
            shown = ", ".join(self.unaccounted_mig[:5]) + (" …" if len(self.unaccounted_mig) > 5 else "")
            parts.append(
                f"{len(self.unaccounted_mig)} MIG instance(s) no claim accounts for are left alone as an "
                f"administrator's; destroy them by hand if Tessera created them ({shown})"
            )
        return "; ".join(parts)


def _markers(
    paths: PluginPaths, *, skip: Collection[ClaimUID]
) -> tuple[dict[ClaimUID, ClaimMarker], list[ClaimUID]]:
    """Markers of our specs not in `skip`, and the specs of ours whose marker cannot be read."""
    found: dict[ClaimUID, ClaimMarker] = {}
    unreadable: list[ClaimUID] = []
    for uid, path in list(list_specs(paths.cdi_dir)):
        if uid in skip:
            continue
        try:
            found[uid] = parse_marker(read_spec(path).annotations, uid=uid)
        except StorageError as e:
            log.warning(
                "a CDI spec of ours says nothing usable about its claim", path=str(path), error=str(e)
            )
            unreadable.append(uid)
    return found, unreadable


def _checked_mig(entry: ClaimEntry, inventory: Inventory, unaccounted: set[str]) -> ClaimEntry:
    """The entry with only those MIG records Tessera's that still match the live instance's UUID."""
    records: list[MigRecord] = []
    for record in entry.mig:
        live = artifacts.find_instance(inventory, artifacts.record_key(record))
        if record.created_by_tessera and live is not None and record.uuid not in (None, live.uuid):
            unaccounted.add(live.uuid)  # someone else's instance at our old placement
            record = replace(record, created_by_tessera=False)  # noqa: PLW2901
        records.append(record)
    return replace(entry, mig=tuple(records))


def adopt_marked(
    cp: Checkpoint, *, paths: PluginPaths, inventory: Inventory | None
) -> tuple[Checkpoint, list[ClaimUID]]:
    """The checkpoint with an entry for each marked spec of ours it lacks (a crash before its save)."""
    markers, _ = _markers(paths, skip=cp.claims)
    if not markers:
        return cp, []
    unaccounted: set[str] = set()
    entries = [
        _checked_mig(m.entry, inventory, unaccounted) if inventory is not None else m.entry
        for m in markers.values()
    ]
    owned = frozenset(g for m in markers.values() for g in m.mig_mode_owned)
    for uid in markers:
        log.info("adopted a prepared claim from its CDI spec", claim=uid)
    return cp.with_entries(entries).with_mig_mode_owned(cp.mig_mode_owned | owned), list(markers)


def rebuild(
    *, paths: PluginPaths, dirs: ClaimDirs, backend: GpuBackend, boot_id: str, reason: str, set_aside: str
) -> tuple[Checkpoint, Recovery]:
    markers, unreadable = _markers(paths, skip=())
    inventory = backend.inventory()
    unaccounted: set[str] = set()
    entries = {uid: _checked_mig(m.entry, inventory, unaccounted) for uid, m in markers.items()}
    unattributed = sorted({*unreadable, *(u for u in dirs.uids() if u not in entries)})
    for uid in unattributed:
        entries[uid] = ClaimEntry(
            uid=uid,
            namespace="",
            name="",
            state=ClaimState.PREPARE_STARTED,
            has_claim_dir=dirs.path(uid).is_dir(),
        )
    ours = {
        PlacementKey(gpu_uuid=r.gpu_uuid, profile_id=r.profile_id, start=r.start)
        for e in entries.values()
        for r in e.mig
        if r.created_by_tessera
    }
    for gpu in inventory.gpus:
        for inst in gpu.mig_instances:
            if PlacementKey(gpu_uuid=gpu.uuid, profile_id=inst.profile_id, start=inst.start) not in ours:
                unaccounted.add(inst.uuid)
    owned = {
        g
        for m in markers.values()
        for g in m.mig_mode_owned
        if (parent := inventory.gpu_by_uuid(g)) is not None and parent.mig_enabled
    }
    cp = Checkpoint(boot_id=boot_id, claims=entries, mig_mode_owned=frozenset(owned))
    recovery = Recovery(
        reason=reason,
        set_aside=set_aside,
        rebuilt=tuple(sorted(markers)),
        unattributed=tuple(unattributed),
        unaccounted_mig=tuple(sorted(unaccounted)),
        mig_mode_owned=tuple(sorted(owned)),
    )
    return cp, recovery
