"""Device taints of unhealthy GPUs (pure): every device built for a GPU (whole, vgpu, MIG) carries its taint.

The taint is `gpu.tessera.dev/unhealthy=<fault>:<effect>` (dra_driver.core.gpu_health decides the effect).
`timeAdded` is when the GPU became unhealthy, so a republish writes the same taint again and the publisher
sees nothing changed; without a known time it is left to the API server.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from datetime import UTC, datetime

from dra_driver.core.families.base import Json
from dra_driver.core.gpu_health import GpuCondition, conditions
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import UNHEALTHY_TAINT_KEY, GpuUUID

GpuTaints = Mapping[GpuUUID, Sequence[Json]]


def timestamp(unix_seconds: int) -> str:
    """RFC 3339 in UTC, to the second, as the API server writes times back."""
    return datetime.fromtimestamp(unix_seconds, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def device_taint(condition: GpuCondition) -> Json | None:
    """The taint of every device of an unhealthy GPU; None for a healthy one."""
    if condition.effect is None:
        return None
    taint: Json = {"key": UNHEALTHY_TAINT_KEY, "value": condition.reason, "effect": condition.effect.value}
    if condition.since:
        taint["timeAdded"] = timestamp(condition.since)
    return taint


def gpu_taints(states: Mapping[GpuUUID, GpuCondition]) -> dict[GpuUUID, tuple[Json, ...]]:
    """GPU UUID → the taints of its devices, for the unhealthy GPUs only."""
    out: dict[GpuUUID, tuple[Json, ...]] = {}
    for uuid, condition in states.items():
        taint = device_taint(condition)
        if taint is not None:
            out[uuid] = (taint,)
    return out


def inventory_taints(inventory: Inventory) -> dict[GpuUUID, tuple[Json, ...]]:
    """The taints of what the backend reports right now (no latching, no time): for the CLI and tools."""
    return gpu_taints(conditions(inventory))


def tainted(devices: Sequence[Json], taints: Sequence[Json]) -> tuple[Json, ...]:
    """The devices with `taints` added (copies; the input is left alone)."""
    if not taints:
        return tuple(devices)
    return tuple({**d, "taints": [*d.get("taints", []), *(dict(t) for t in taints)]} for d in devices)
