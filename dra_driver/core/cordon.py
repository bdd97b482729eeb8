"""GPUs an administrator cordoned or drained (pure): the Node annotation that records them, and the device
taints they become.

`tessera gpu cordon|drain|uncordon NODE gpu-N` (dra_driver/admin/gpu_cordon.py) writes the annotation
`gpu.tessera.dev/cordon` on the Node, e.g. `gpu-3=NoSchedule@2026-11-28T12:00:00Z,gpu-5=NoExecute@…`; the
node daemon reads it with the Node (kubelet_plugin/node/node_object.py) and taints every device of those
GPUs (whole, vgpu, MPS, MIG placements) with `gpu.tessera.dev/cordoned`: `cordon` (NoSchedule: nothing new
lands there, running pods stay) or `drain` (NoExecute: Kubernetes' device-taint eviction removes the pods
there). The annotation lives in the API, so the state survives plugin restarts and upgrades.

The annotation is written by an administrator (or this CLI) and parsed strictly and with bounds: a bad value
names the annotation, the entry and the fix, and the daemon keeps the last good one.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC, datetime

from dra_driver.core.families.base import Json
from dra_driver.core.gpu_health import Effect
from dra_driver.core.taints import timestamp
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import MAX_GPUS, Inventory
from dra_driver.vocabulary.names import CORDON_ANNOTATION, CORDON_TAINT_KEY, GpuUUID

MAX_ANNOTATION_CHARS = 4096  # 16 GPUs at ~45 characters each fit many times over
_ENTRY = re.compile(
    r"gpu-(0|[1-9][0-9]?)=(NoSchedule|NoExecute)(?:@([0-9]{4}-[0-9]{2}-[0-9]{2}T[0-9:]{8}Z))?"
)
# what the taint's value says, for `kubectl get resourceslice -o yaml` and `tessera explain`
TAINT_VALUES = {Effect.NO_SCHEDULE: "cordon", Effect.NO_EXECUTE: "drain"}
FIX = "write entries as gpu-<index>=NoSchedule|NoExecute[@<RFC 3339 UTC time>], separated by commas"


@dataclass(frozen=True, slots=True)
class GpuCordon:
    """One GPU's cordon: `since` is when it was written (Unix seconds; 0 when the entry gave no time)."""

    index: int
    effect: Effect
    since: int = 0


Cordons = Mapping[int, GpuCordon]  # GPU index → its cordon


def _seconds(text: str, entry: str) -> int:
    try:
        when = datetime.strptime(text, "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC)
    except ValueError as e:
        raise ConfigError(f"annotation {CORDON_ANNOTATION}: {entry!r} has no valid time: {FIX}") from e
    return int(when.timestamp())


def parse_cordons(text: str) -> dict[int, GpuCordon]:
    """The annotation's value → GPU index → cordon; ConfigError naming the entry and the fix."""
    if len(text) > MAX_ANNOTATION_CHARS:
        raise ConfigError(
            f"annotation {CORDON_ANNOTATION} is {len(text)} characters, over {MAX_ANNOTATION_CHARS}: {FIX}"
        )
    out: dict[int, GpuCordon] = {}
    for raw in text.split(","):
        entry = raw.strip()
        if not entry:
            continue
        m = _ENTRY.fullmatch(entry)
        if m is None:
            raise ConfigError(f"annotation {CORDON_ANNOTATION}: {entry[:64]!r} is not an entry: {FIX}")
        index = int(m.group(1))
        if index >= MAX_GPUS:
            raise ConfigError(
                f"annotation {CORDON_ANNOTATION}: {entry!r} names GPU {index}, a node has at most {MAX_GPUS}"
            )
        if index in out:
            raise ConfigError(f"annotation {CORDON_ANNOTATION}: gpu-{index} is named twice; keep one entry")
        since = _seconds(m.group(3), entry) if m.group(3) else 0
        out[index] = GpuCordon(index, Effect(m.group(2)), since)
    return out


def render_cordons(cordons: Cordons) -> str:
    """The annotation's value, by GPU index; the parser reads back what this writes."""
    parts = []
    for index in sorted(cordons):
        c = cordons[index]
        when = f"@{timestamp(c.since)}" if c.since else ""
        parts.append(f"gpu-{index}={c.effect.value}{when}")
    return ",".join(parts)


def with_cordon(cordons: Cordons, index: int, effect: Effect, *, now: int) -> dict[int, GpuCordon]:
    """`cordons` with GPU `index` cordoned (NoSchedule) or drained (NoExecute); an unchanged effect keeps its
    time, so cordoning twice changes nothing."""
    out = dict(cordons)
    old = out.get(index)
    out[index] = old if old is not None and old.effect is effect else GpuCordon(index, effect, now)
    return out


def without_cordon(cordons: Cordons, index: int) -> dict[int, GpuCordon]:
    return {i: c for i, c in cordons.items() if i != index}


def cordon_taint(cordon: GpuCordon) -> Json:
    """The taint every device of a cordoned GPU carries."""
    taint: Json = {
        "key": CORDON_TAINT_KEY,
        "value": TAINT_VALUES[cordon.effect],
        "effect": cordon.effect.value,
    }
    if cordon.since:
        taint["timeAdded"] = timestamp(cordon.since)
    return taint


def cordon_taints(inventory: Inventory, cordons: Cordons) -> dict[GpuUUID, tuple[Json, ...]]:
    """GPU UUID → the cordon taint of its devices; a cordon of a GPU the node does not have taints nothing."""
    out: dict[GpuUUID, tuple[Json, ...]] = {}
    for index, cordon in cordons.items():
        gpu = inventory.gpu_by_index(index)
        if gpu is not None:
            out[gpu.uuid] = (cordon_taint(cordon),)
    return out


def merged_taints(
    *parts: Mapping[GpuUUID, tuple[Json, ...]],
) -> dict[GpuUUID, tuple[Json, ...]]:
    """Health taints and cordon taints together, per GPU, in the order given."""
    out: dict[GpuUUID, tuple[Json, ...]] = {}
    for part in parts:
        for uuid, taints in part.items():
            out[uuid] = (*out.get(uuid, ()), *taints)
    return out
