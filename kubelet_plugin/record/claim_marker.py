"""Tessera's marker in a claim's CDI spec: its checkpoint entry, kept where the claim's files are (pure).

The checkpoint is the one record of what Tessera prepared. If it is ever unreadable, each prepared claim's
spec still says which claim it belongs to (namespace, name, UID), what was answered, what its families hold
(the MIG instances Tessera created for it, ...), and on which GPUs Tessera had changed node-wide state
(switched MIG mode on), so the node's state can be rebuilt from the node itself
(`kubelet_plugin.claims.recovery`). Container runtimes ignore spec annotations.
"""

from __future__ import annotations

import json
import re
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.core import families
from dra_driver.core.families.protocol import Placing
from dra_driver.vocabulary.errors import InvalidNameError, StorageError
from dra_driver.vocabulary.excerpt import clip
from dra_driver.vocabulary.names import DRIVER_NAME, ClaimUID, Family, GpuUUID
from kubelet_plugin.record.checkpoint import ClaimEntry, ClaimState

ENTRY_ANNOTATION = f"{DRIVER_NAME}/checkpoint-entry"


def owned_annotation(owned_key: str) -> str:
    """`migModeOwned` → `gpu.tessera.dev/mig-mode-owned`: where a family's node-wide ownership is marked."""
    return f"{DRIVER_NAME}/" + re.sub(r"(?<!^)([A-Z])", r"-\1", owned_key).lower()


@dataclass(frozen=True, slots=True)
class ClaimMarker:
    entry: ClaimEntry  # as it is once the claim is prepared
    owned: Mapping[Family, frozenset[GpuUUID]]  # per family, GPUs this claim uses whose state Tessera changed


def _owning() -> list[tuple[Placing[Any, Any, Any], str]]:
    return [(f, owned_annotation(f.owned_key)) for f in families.placing()]


def marker_annotations(entry: ClaimEntry, *, owned: Mapping[Family, frozenset[GpuUUID]]) -> dict[str, str]:
    """The annotations for the spec of a claim being prepared; only its own GPUs' node-wide state is named."""
    completed = entry.with_state(ClaimState.PREPARE_COMPLETED)
    out = {ENTRY_ANNOTATION: json.dumps(completed.to_dict(), sort_keys=True, separators=(",", ":"))}
    for family, annotation in _owning():
        used = family.record_gpus(entry.family_records(family))
        mine = sorted(g for g in owned.get(family.name, frozenset()) if g in used)
        if mine:
            out[annotation] = ",".join(mine)
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
    owned = {
        family.name: frozenset(GpuUUID(g) for g in annotations.get(annotation, "").split(",") if g)
        for family, annotation in _owning()
    }
    return ClaimMarker(
        entry=entry.with_state(ClaimState.PREPARE_COMPLETED), owned={f: g for f, g in owned.items() if g}
    )
