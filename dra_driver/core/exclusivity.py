"""The prepare side's own check that no GPU is handed out twice in ways that exclude each other (pure).

The scheduler is what keeps a whole GPU, its vGPU and MPS shares and its MIG placements apart (one counter set
per GPU). Prepare does not trust that alone: a scheduler bug, a stale ResourceSlice, or a pool republished
without a device that is still allocated (kubernetes/kubernetes#140806: the allocator then forgets that
device's counters) can hand a second, conflicting device to a claim. Before anything of a claim is created,
each of its devices' occupancy (`DeviceFamily.occupancy`) is compared with what the node's other claims hold;
the first overlap refuses the claim with an error naming both, and the claim already holding the GPU is left
as it is. docs/architecture.md, "The claim life cycle".
"""

from __future__ import annotations

from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from dra_driver.core import families
from dra_driver.core.families.base import AnyPlanned, SliceOccupancy
from dra_driver.vocabulary.errors import ExclusivityError, InvalidNameError
from dra_driver.vocabulary.inventory import Inventory


@dataclass(frozen=True, slots=True)
class HeldDevice:
    """A device a claim on this node holds (prepared, or planned earlier in the same call)."""

    claim: str  # namespace/name, as errors name it
    device: str


@dataclass(frozen=True, slots=True)
class _Taken:
    claim: str
    device: str
    gpu_index: int
    occupancy: SliceOccupancy
    own: bool = False  # a device of the claim being checked


def _taken(held: HeldDevice, inventory: Inventory, *, own: bool = False) -> _Taken | None:
    """The held device's occupancy; None for a device on no GPU of this inventory (nothing to overlap)."""
    try:
        parsed = families.parse_device_name(held.device)
    except InvalidNameError:
        return None
    gpu = inventory.gpu_by_index(parsed.index)
    if gpu is None:
        return None
    return _Taken(held.claim, held.device, gpu.index, parsed.family.occupancy(parsed.detail, gpu), own)


def check_exclusive(
    devices: Sequence[AnyPlanned], *, claim: str, held: Iterable[HeldDevice], inventory: Inventory
) -> None:
    """Raise ExclusivityError when one of the claim's devices overlaps a held device or another of its own."""
    taken = [t for h in held if (t := _taken(h, inventory)) is not None]
    for d in devices:
        mine = _taken(HeldDevice(claim, d.device), inventory, own=True)
        if mine is None:
            continue
        for other in taken:
            if other.gpu_index == d.gpu_index and mine.occupancy.excludes(other.occupancy):
                raise ExclusivityError(_message(d, mine.occupancy, other))
        taken.append(mine)


def _message(d: AnyPlanned, mine: SliceOccupancy, other: _Taken) -> str:
    where = f"device {d.device} (request {d.request}) is {mine.what} on GPU {d.gpu_index}"
    if other.own:
        return (
            f"{where}, which excludes device {other.device} ({other.occupancy.what}) of the same claim; "
            "the scheduler allocated conflicting devices: delete the claim so it is allocated again"
        )
    return (
        f"{where}, but claim {other.claim} prepared on this node holds device {other.device} "
        f"({other.occupancy.what}) there and the two exclude each other. The scheduler allocated conflicting "
        "devices (a stale or republished ResourceSlice, kubernetes/kubernetes#140806); claim "
        f"{other.claim} is left as it is: delete this claim's pod so it is scheduled again once the GPU is "
        "free"
    )
