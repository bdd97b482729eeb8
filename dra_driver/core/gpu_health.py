"""Which faults make a GPU unhealthy, how badly, and for how long (pure).

- XIDs: every critical XID is a device fault except those NVIDIA's own plugins treat as the application's
  (13, 31, 43, 45, 68, 109); XID 79 means the GPU has fallen off the bus: it is lost.
- Effect of the device taint: NoExecute for a lost GPU (its pods cannot work), NoSchedule for anything else
  (running pods may finish; nothing new lands there).
- How long: faults that are *events* (an XID, a double-bit ECC error) are fatal and latch: the GPU stays
  unhealthy after the backend stops reporting them, until the plugin restarts (after an administrator reset
  the GPU), unless the policy lets it recover. Faults that are *states* (lost, NVML failing on the device, a
  backend's plain "unhealthy") clear as soon as the backend stops reporting them.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from enum import StrEnum

from dra_driver.vocabulary.inventory import FaultKind, Gpu, GpuFault, Inventory
from dra_driver.vocabulary.names import GpuUUID

APPLICATION_XIDS = frozenset({13, 31, 43, 45, 68, 109})
LOST_XIDS = frozenset({79})
XID_MEANINGS = {
    48: "double-bit ECC error",
    63: "ECC page retirement or row remapping recorded",
    64: "ECC page retirement or row remapping failed",
    74: "NVLink error",
    79: "GPU has fallen off the bus",
    92: "high single-bit ECC error rate",
    94: "contained ECC error",
    95: "uncontained ECC error",
    119: "GSP RPC timeout",
    120: "GSP error",
}


class Effect(StrEnum):
    """A device taint's effect (resource.k8s.io/v1 DeviceTaint.effect)."""

    NO_SCHEDULE = "NoSchedule"
    NO_EXECUTE = "NoExecute"


@dataclass(frozen=True, slots=True)
class HealthPolicy:
    recover_fatal_xids: bool = False  # let a GPU whose XID/ECC faults stopped being reported become healthy


def fault_from_xid(xid: int, detail: str = "") -> GpuFault | None:
    """The fault a critical XID event means, or None for an application's XID."""
    if xid in APPLICATION_XIDS:
        return None
    kind = FaultKind.LOST if xid in LOST_XIDS else FaultKind.XID
    return GpuFault(kind=kind, xid=xid, detail=detail)


def faults_of(gpu: Gpu) -> tuple[GpuFault, ...]:
    """What is wrong with a GPU now, as its backend reports it."""
    reported = () if gpu.healthy else (GpuFault(FaultKind.REPORTED),)
    return tuple(dict.fromkeys((*gpu.faults, *reported)))


def effect_of(fault: GpuFault) -> Effect:
    return Effect.NO_EXECUTE if fault.kind is FaultKind.LOST else Effect.NO_SCHEDULE


def latches(fault: GpuFault) -> bool:
    """Whether a fault is a fatal event that outlives its report."""
    return fault.xid is not None or fault.kind in (FaultKind.XID, FaultKind.ECC_DBE)


def short_name(fault: GpuFault) -> str:
    """A label value naming the fault: `xid-48`, `lost`, `ecc-dbe`, `nvml-error`, `reported`."""
    if fault.xid is not None and fault.kind is not FaultKind.LOST:
        return f"xid-{fault.xid}"
    return fault.kind.value


def describe(fault: GpuFault) -> str:
    if fault.xid is not None:
        text = f"XID {fault.xid}" + (f" ({XID_MEANINGS[fault.xid]})" if fault.xid in XID_MEANINGS else "")
    else:
        text = {
            FaultKind.ECC_DBE: "double-bit ECC error",
            FaultKind.LOST: "GPU lost",
            FaultKind.NVML_ERROR: "NVML fails on the device",
            FaultKind.REPORTED: "reported unhealthy",
            FaultKind.XID: "critical XID",
        }[fault.kind]
    return f"{text}: {fault.detail}" if fault.detail else text


@dataclass(frozen=True, slots=True)
class GpuCondition:
    """One GPU's health as the daemon decided it."""

    uuid: GpuUUID
    index: int
    faults: tuple[GpuFault, ...] = ()  # worst first
    since: int = 0  # unix seconds when it became unhealthy; 0 = not known (or healthy)

    @property
    def healthy(self) -> bool:
        return not self.faults

    @property
    def effect(self) -> Effect | None:
        return effect_of(self.faults[0]) if self.faults else None

    @property
    def reason(self) -> str:
        return short_name(self.faults[0]) if self.faults else ""

    @property
    def message(self) -> str:
        if not self.faults:
            return ""
        return f"GPU {self.uuid} (index {self.index}): " + "; ".join(describe(f) for f in self.faults)


def _worst_first(faults: Iterable[GpuFault]) -> tuple[GpuFault, ...]:
    unique = tuple(dict.fromkeys(faults))
    return tuple(sorted(unique, key=lambda f: effect_of(f) is not Effect.NO_EXECUTE))


def conditions(
    inventory: Inventory,
    *,
    previous: Mapping[GpuUUID, GpuCondition] | None = None,
    policy: HealthPolicy = HealthPolicy(),
    now: int = 0,
) -> dict[GpuUUID, GpuCondition]:
    """Every GPU's condition: what its backend reports now, plus the latched faults of `previous`."""
    before = previous or {}
    out: dict[GpuUUID, GpuCondition] = {}
    for gpu in inventory.gpus:
        was = before.get(gpu.uuid)
        kept = () if was is None or policy.recover_fatal_xids else tuple(f for f in was.faults if latches(f))
        faults = _worst_first((*faults_of(gpu), *kept))
        since = 0 if not faults else (was.since if was is not None and not was.healthy else now)
        out[gpu.uuid] = GpuCondition(uuid=gpu.uuid, index=gpu.index, faults=faults, since=since)
    return out
