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

from collections.abc import Collection, Iterable, Mapping
from dataclasses import dataclass

import structlog

from cdi.writer import list_specs, read_spec
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID, Family, GpuUUID
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.record.claim_marker import ClaimMarker, parse_marker

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Recovery:
    """What a rebuild found; `summary` is what the log and the Node Event say."""

    reason: str  # why the checkpoint could not be read
    set_aside: str  # where the unreadable file now is
    rebuilt: tuple[ClaimUID, ...]  # claims recovered from their specs' markers
    unattributed: tuple[ClaimUID, ...]  # files kept whose claim is unknown
    unaccounted_mig: tuple[str, ...]  # MIG instances treated as an administrator's
    mig_mode_owned: tuple[GpuUUID, ...]  # GPUs whose node-wide state the markers say Tessera changed

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


def marked_claims(
    state: NodeState, *, skip: Collection[ClaimUID]
) -> tuple[dict[ClaimUID, ClaimMarker], list[ClaimUID]]:
    """Markers of our specs not in `skip`, and the specs of ours whose marker cannot be read."""
    found: dict[ClaimUID, ClaimMarker] = {}
    unreadable: list[ClaimUID] = []
    for uid, path in list(list_specs(state.paths.cdi_dir)):
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


def _checked(state: NodeState, entry: ClaimEntry, inventory: Inventory) -> tuple[ClaimEntry, set[str]]:
    """The entry as its host parts vouch for it against the live node, and what they disown."""
    disowned: set[str] = set()
    for host in state.hosts:
        entry, lost = host.recovered(entry, inventory=inventory)
        disowned |= lost
    return entry, disowned


def _owned(markers: Iterable[ClaimMarker]) -> dict[Family, frozenset[GpuUUID]]:
    owned: dict[Family, frozenset[GpuUUID]] = {}
    for m in markers:
        for family, gpus in m.owned.items():
            owned[family] = owned.get(family, frozenset()) | gpus
    return owned


def _with_owned(cp: Checkpoint, owned: Mapping[Family, frozenset[GpuUUID]]) -> Checkpoint:
    for family, gpus in owned.items():
        cp = cp.with_owned(family, cp.owned_by(family) | gpus)
    return cp


def adopt_marked(
    cp: Checkpoint, *, state: NodeState, inventory: Inventory | None
) -> tuple[Checkpoint, list[ClaimUID]]:
    """The checkpoint with an entry for each marked spec of ours it lacks (a crash before its save)."""
    markers, _ = marked_claims(state, skip=cp.claims)
    if not markers:
        return cp, []
    entries = [
        _checked(state, m.entry, inventory)[0] if inventory is not None else m.entry for m in markers.values()
    ]
    for uid in markers:
        log.info("adopted a prepared claim from its CDI spec", claim=uid)
    return _with_owned(cp.with_entries(entries), _owned(markers.values())), list(markers)


def rebuild(*, state: NodeState, reason: str, set_aside: str) -> tuple[Checkpoint, Recovery]:
    markers, unreadable = marked_claims(state, skip=())
    inventory = state.backend.inventory()
    unaccounted: set[str] = set()
    entries: dict[ClaimUID, ClaimEntry] = {}
    for uid, m in markers.items():
        entries[uid], lost = _checked(state, m.entry, inventory)
        unaccounted |= lost
    unattributed = sorted({*unreadable, *(u for u in state.dirs.uids() if u not in entries)})
    for uid in unattributed:
        entries[uid] = ClaimEntry(
            uid=uid,
            namespace="",
            name="",
            state=ClaimState.PREPARE_STARTED,
            has_claim_dir=state.dirs.path(uid).is_dir(),
        )
    cp = Checkpoint(boot_id=state.boot_id, claims=entries)
    ours = cp.placements()
    unaccounted |= {i.uuid for g in inventory.gpus for i in g.mig_instances if i.placement not in ours}
    owned = _owned(markers.values())
    cp = _with_owned(cp, owned)
    recovery = Recovery(
        reason=reason,
        set_aside=set_aside,
        rebuilt=tuple(sorted(markers)),
        unattributed=tuple(unattributed),
        unaccounted_mig=tuple(sorted(unaccounted)),
        mig_mode_owned=tuple(sorted({g for gpus in owned.values() for g in gpus})),
    )
    return cp, recovery
