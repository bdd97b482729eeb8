"""GPU memory oversubscription: the node setting, the host-backed capacity it publishes, and the rules a
claim's share of it must keep (pure). docs/gpu-sharing.md, "Oversubscription".

A node group's `memoryOversubscription` (a ratio, 1 to MAX_RATIO; 1: none, the default) makes each vgpu
device publish, beside its `memory` (the GPU's own memory: what every claim is promised to hold on the
device), a `virtualMemory` capacity of (ratio - 1) times it: memory a claim may be given beyond what the
device can hold, which the interception library serves from managed memory the driver pages between host and
device. Only a claim whose VgpuConfig says `memoryOversubscription: enabled` may consume it; its limit is
its `memory` plus its `virtualMemory`, and only its `memory` is held on the device for it. A claim that did
not opt in consumes `memory` alone, which the scheduler keeps within the GPU's memory, so whatever opted-in
claims do, every byte a claim was promised fits on the device.

The host must back what the node publishes: the sum over the GPUs that may offer vgpu of their
`virtualMemory` may take at most HOST_SHARE of the host's memory (MemTotal), the rest being the system's,
the kubelet's and the containers' own; the node daemon refuses to start otherwise (`check_host_backing`).
"""

from __future__ import annotations

import math
from enum import StrEnum
from fractions import Fraction

from dra_driver.core.families.base import NodeSetting
from dra_driver.core.families.published import MIB, mib_quantity
from dra_driver.vocabulary.errors import ClaimError, ConfigError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import Gpu, Inventory
from dra_driver.vocabulary.names import Cap

MAX_RATIO = 8  # more host memory than this per GPU byte pages far more than it computes
# Of the host's memory, what host-backed GPU memory may take: the managed pages a claim's driver evicts live
# in host memory, beside the system, the kubelet and the containers' own memory (a quarter left to them).
HOST_SHARE = Fraction(3, 4)
GIB = 1 << 30


class Oversubscription(StrEnum):
    """A claim's opt-in (VgpuConfig.memoryOversubscription): whether host memory may back part of it."""

    DISABLED = "disabled"
    ENABLED = "enabled"


def _ratio(raw: object) -> float:
    if isinstance(raw, bool) or not isinstance(raw, int | float) or not math.isfinite(raw):
        raise ConfigError(f"memoryOversubscription: expected a number like 1.5, got {excerpt(raw)}")
    if not 1 <= raw <= MAX_RATIO:
        raise ConfigError(
            f"memoryOversubscription: {raw} is out of range; use 1..{MAX_RATIO} (1: every byte a claim is "
            "given is device memory; 2: claims may be given twice the GPU's memory, half of it host-backed)"
        )
    return float(raw)


def virtual_bytes(gpu: Gpu, ratio: float) -> int:
    """The host-backed memory a GPU's vgpu device offers at `ratio`: (ratio - 1) times its memory, in whole
    MiB (the capacity's step); 0 at ratio 1."""
    memory = gpu.memory_bytes // MIB * MIB
    return math.floor(Fraction(ratio) * memory - memory) // MIB * MIB


def virtual_capacity(gpu: Gpu, ratio: float) -> dict[str, object]:
    """The `virtualMemory` capacity of a vgpu device, or nothing at ratio 1 (so the slices stay as before)."""
    extra = virtual_bytes(gpu, ratio)
    if not extra:
        return {}
    value = mib_quantity(extra)
    return {
        Cap.VIRTUAL_MEMORY: {
            "value": value,
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": value, "step": "1Mi"}},
        }
    }


def check_opt_in(*, where: str, virtual: int, opted_in: bool, gpu: Gpu, ratio: float) -> None:
    """A claim consumes host-backed memory only when it opted in, and opts in only where the node offers it;
    `virtual` is what it consumed of `virtualMemory` (checked against the policy already)."""
    if opted_in and virtual_bytes(gpu, ratio) == 0:
        raise ConfigError(
            f"{where}: VgpuConfig memoryOversubscription: enabled, but this node offers no host-backed "
            "memory (its memoryOversubscription is 1); set memoryOversubscription in the node group's "
            "settings, or drop the opt-in"
        )
    if virtual and not opted_in:
        raise ClaimError(
            f"{where}: consumed virtualMemory {virtual >> 20}Mi without opting in; set VgpuConfig "
            "memoryOversubscription: enabled (or use the DeviceClass vgpu-oversubscribed.tessera.dev), or "
            "ask for memory only"
        )


def _gib(n: int | Fraction) -> str:
    return f"{float(n) / GIB:.1f}".removesuffix(".0") + "Gi"


def check_host_backing(inventory: Inventory, ratio: float) -> None:
    """Refuse a ratio whose host-backed memory the host cannot hold: the `virtualMemory` of every GPU that may
    offer vgpu (a GPU in MIG mode that cannot leave it offers none) must fit in HOST_SHARE of the host's
    memory. A host whose memory is not known backs nothing."""
    gpus = [g for g in inventory.gpus if not g.mig_enabled or g.architecture.can_toggle_mig_without_reset]
    virtual = sum(virtual_bytes(g, ratio) for g in gpus)
    if not virtual:
        return
    host = inventory.host_memory_bytes
    where = "in this node group's settings (nodeGroups[].memoryOversubscription in the chart)"
    if host is None:
        raise ConfigError(
            f"memoryOversubscription: {ratio:g} needs host memory to back {_gib(virtual)} of virtualMemory, "
            "but this node's host memory (MemTotal in /proc/meminfo) could not be read; set "
            f"memoryOversubscription to 1 {where}"
        )
    backable = host * HOST_SHARE
    if virtual <= backable:
        return
    device = sum(g.memory_bytes // MIB * MIB for g in gpus)
    highest = math.floor((1 + backable / device) * 100) / 100
    raise ConfigError(
        f"memoryOversubscription: {ratio:g} publishes {_gib(virtual)} of host-backed virtualMemory on this "
        f"node ({len(gpus)} GPU(s), {_gib(device)} of GPU memory, times {ratio - 1:g}), more than its host "
        f"memory backs: MemTotal {_gib(host)}, of which at most {HOST_SHARE.numerator}/"
        f"{HOST_SHARE.denominator} ({_gib(backable)}) may back GPU memory; set memoryOversubscription to at "
        f"most {highest:g} {where}, or 1 to turn it off"
    )


# Declared by vgpu (its node setting). MPS does not read it: an MPS client's memory is limited by the MPS
# server's pinned-memory limit, which managed memory does not get past (docs/gpu-sharing.md).
OVERSUBSCRIPTION = NodeSetting(
    key="memoryOversubscription",
    default=1.0,
    meaning=(
        f"the vgpu memory a GPU offers, as a ratio of its own (1..{MAX_RATIO}; default 1): past 1 the rest "
        "is published as virtualMemory, host-backed, for claims that opt in; the node refuses a ratio whose "
        "virtualMemory, over its GPUs, passes three quarters of its host memory (MemTotal)"
    ),
    decode=_ratio,
    schema={"type": "number", "minimum": 1, "maximum": MAX_RATIO},
    fits=check_host_backing,
)
