"""Tessera's marker in a claim's CDI spec: its checkpoint entry, kept where the claim's files are (pure).

The checkpoint is the one record of what Tessera prepared. If it is ever unreadable, each prepared claim's
spec still says which claim it belongs to (namespace, name, UID), what was answered, which MIG instances
Tessera created for it, and on which GPUs Tessera had switched MIG mode on, so the node's state can be rebuilt
from the node itself (`kubelet_plugin.recovery`). Container runtimes ignore spec annotations.
"""

from __future__ import annotations

import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass

from dra_driver.errors import InvalidNameError, StorageError
from dra_driver.excerpt import clip
from dra_driver.names import DRIVER_NAME, ClaimUID, GpuUUID
from kubelet_plugin.checkpoint import ClaimEntry, ClaimState

ENTRY_ANNOTATION = f"{DRIVER_NAME}/checkpoint-entry"
MIG_MODE_ANNOTATION = f"{DRIVER_NAME}/mig-mode-owned"


@dataclass(frozen=True, slots=True)
class ClaimMarker:
    entry: ClaimEntry  # as it is once the claim is prepared
    mig_mode_owned: frozenset[GpuUUID]  # GPUs this claim uses whose MIG mode Tessera switched on


def marker_annotations(entry: ClaimEntry, *, mig_mode_owned: Iterable[GpuUUID]) -> dict[str, str]:
    """The annotations for the spec of a claim being prepared; only its own GPUs' MIG mode is named."""
    completed = entry.with_state(ClaimState.PREPARE_COMPLETED)
    used = {r.gpu_uuid for r in entry.mig}
    out = {ENTRY_ANNOTATION: json.dumps(completed.to_dict(), sort_keys=True, separators=(",", ":"))}
    owned = sorted(g for g in mig_mode_owned if g in used)
    if owned:
        out[MIG_MODE_ANNOTATION] = ",".join(owned)
    return out


def parse_marker(annotations: Mapping[str, str], *, uid: ClaimUID) -> ClaimMarker:
    """The marker of the spec named for `uid`; StorageError if missing, malformed or for another UID."""
    raw = annotations.get(ENTRY_ANNOTATION)
    if raw is None:
        raise StorageError(f"the spec carries no {ENTRY_ANNOTATION} annotation")
    try:
        doc = json.loads(raw)
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        entry = ClaimEntry.from_dict(doc)
    except (ValueError, RecursionError, InvalidNameError) as e:
        raise StorageError(f"annotation {ENTRY_ANNOTATION} is malformed ({clip(str(e), 200)})") from e
    if entry.uid != uid:
        raise StorageError(f"annotation {ENTRY_ANNOTATION} names claim {entry.uid}, the file claim {uid}")
    owned = annotations.get(MIG_MODE_ANNOTATION, "")
    return ClaimMarker(
        entry=entry.with_state(ClaimState.PREPARE_COMPLETED),
        mig_mode_owned=frozenset(GpuUUID(g) for g in owned.split(",") if g),
    )
