"""The rule for MIG mode Tessera switched on (pure): when a GPU it put in MIG mode goes back to MIG mode off.
The MIG host part (kubelet_plugin/host_parts/mig.py) applies it after claims leave; cleanup plans with it."""

from __future__ import annotations

from collections.abc import Collection
from dataclasses import dataclass

from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import GpuUUID


@dataclass(frozen=True, slots=True)
class MigModeRestore:
    """Which GPUs whose MIG mode Tessera switched on go back to MIG mode off, once no claim uses them."""

    switch_off: tuple[GpuUUID, ...]  # MIG mode on, no claim and no instance left: switch it off
    keep: frozenset[GpuUUID]  # still Tessera's to switch off later (a claim or an instance is there)


def mig_mode_restore(
    owned: Collection[GpuUUID],
    *,
    in_use: Collection[GpuUUID],
    inventory: Inventory,
    going: Collection[str] = (),
) -> MigModeRestore:
    """The rule for MIG mode Tessera switched on (`owned`): off once no claim (`in_use`) and no instance (but
    those `going`, by UUID) is on the GPU; a GPU that is gone or already off is simply no longer owned."""
    off: list[GpuUUID] = []
    keep: set[GpuUUID] = set()
    for uuid in sorted(owned):
        gpu = inventory.gpu_by_uuid(uuid)
        left = [i for i in gpu.mig_instances if i.uuid not in going] if gpu is not None else []
        if uuid in in_use or left:
            keep.add(uuid)
        elif gpu is not None and gpu.mig_enabled:
            off.append(uuid)
    return MigModeRestore(switch_off=tuple(off), keep=frozenset(keep))
