"""What each prepared claim holds, for the readers beside prepare (metrics, usage in claim status).

`prepared_claims` is the one place those readers learn it: the checkpoint's completed entries, the GPUs of
the inventory, and each claim's limits file (the limits the library enforces: the daemon's own copy, which no
container can write; containers get it through a read-only mount); each device's family says what it holds
(`DeviceFamily.allotment`). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_driver.core.families import parse_device_name
from dra_driver.core.families.protocol import Recording, whole_gpu
from dra_driver.libtessera.limits_file import GpuLimitLine
from dra_driver.libtessera.names import REGION_FILE_NAME, SHARED_DIR_NAME
from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.inventory import Gpu, Inventory
from dra_driver.vocabulary.names import ClaimUID, DeviceName, Family, GpuUUID
from kubelet_plugin.library_files.limits import read_limits
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One prepared device of a claim, with the limits it was given."""

    device: str
    family: Family
    gpu_index: int
    gpu_uuid: GpuUUID
    memory_limit_bytes: int  # a whole GPU: all of it; MIG: the instance's; vgpu, MPS: the limits file's
    cores_ratio: float  # share of the GPU's SMs: 1 whole, the instance's SMs for MIG, cores/100 for vgpu
    mig_profile: str | None = None
    mig_uuid: str | None = None
    metered: bool = False  # the interception library keeps its usage in the claim's region
    # what usage read from a region is clipped to: the GPU's memory, or the claim's limit where it is larger
    # (a claim that opted into memory oversubscription)
    gpu_memory_bytes: int = 0


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    uid: ClaimUID
    namespace: str
    name: str
    devices: tuple[ClaimDevice, ...]
    region: Path | None  # claims with the library (vgpu, MPS): the accounting region it keeps

    @property
    def metered_devices(self) -> tuple[ClaimDevice, ...]:
        return tuple(d for d in self.devices if d.metered)


def _device(entry: ClaimEntry, name: str, gpu: Gpu, limits: Mapping[GpuUUID, GpuLimitLine]) -> ClaimDevice:
    family = parse_device_name(name).family
    limited = limits.get(gpu.uuid)  # a line for the GPU: the library limits the device
    a = (
        family.allotment(DeviceName(name), gpu, entry.family_records(family), limited)
        if isinstance(family, Recording)
        else whole_gpu(gpu)
    )
    return ClaimDevice(
        name,
        family.name,
        gpu.index,
        gpu.uuid,
        a.memory_bytes,
        a.cores_ratio,
        mig_profile=a.mig_profile,
        mig_uuid=a.mig_uuid,
        metered=limited is not None,
        gpu_memory_bytes=max(gpu.memory_bytes, a.memory_bytes),
    )


def prepared_claims(
    checkpoint: Checkpoint, inventory: Inventory, claims_dir: Path
) -> tuple[PreparedClaim, ...]:
    """Every claim prepared on this node with its devices (those of our pool on GPUs the inventory has)."""
    out: list[PreparedClaim] = []
    for entry in sorted(checkpoint.claims.values(), key=lambda e: (e.namespace, e.name, e.uid)):
        if entry.state is not ClaimState.PREPARE_COMPLETED:
            continue
        claim_dir = claims_dir / entry.uid if entry.has_claim_dir else None
        limits = read_limits(claim_dir) if claim_dir is not None else {}
        devices: list[ClaimDevice] = []
        for record in entry.devices:
            try:
                index = parse_device_name(record.device_name).index
            except InvalidNameError:
                continue
            gpu = inventory.gpu_by_index(index)
            if gpu is not None:
                devices.append(_device(entry, record.device_name, gpu, limits))
        region = claim_dir / SHARED_DIR_NAME / REGION_FILE_NAME if claim_dir is not None else None
        out.append(PreparedClaim(entry.uid, entry.namespace, entry.name, tuple(devices), region))
    return tuple(out)
