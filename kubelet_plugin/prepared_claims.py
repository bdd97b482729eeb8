"""What each prepared claim holds, for the readers beside prepare (metrics, usage in claim status).

`prepared_claims` is the one place those readers learn it: the checkpoint's completed entries, the GPUs of
the inventory, and each vgpu claim's limits file (the limits the library enforces). Nothing here writes.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

from dra_driver.errors import InvalidNameError, StorageError
from dra_driver.files import read_bounded
from dra_driver.model import Gpu, Inventory
from dra_driver.names import LIMITS_FILE_NAME, REGION_FILE_NAME, ClaimUID, Family, GpuUUID, parse_device_name
from kubelet_plugin.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.claimdir import parse_limits

MIB = 1 << 20
MAX_LIMITS_BYTES = 64 * 1024


@dataclass(frozen=True, slots=True)
class ClaimDevice:
    """One prepared device of a claim, with the limits it was given."""

    device: str
    family: Family
    gpu_index: int
    gpu_uuid: GpuUUID
    memory_limit_bytes: int  # a whole GPU: all of it; MIG: the instance's; vgpu: the limits file's
    cores_ratio: float  # share of the GPU's SMs: 1 whole, the instance's SMs for MIG, cores/100 for vgpu
    mig_profile: str | None = None
    mig_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    uid: ClaimUID
    namespace: str
    name: str
    devices: tuple[ClaimDevice, ...]
    region: Path | None  # vgpu claims: the accounting region the library keeps

    @property
    def vgpu_devices(self) -> tuple[ClaimDevice, ...]:
        return tuple(d for d in self.devices if d.family is Family.VGPU)


def _limits(claim_dir: Path) -> dict[GpuUUID, tuple[int, int]]:
    try:
        data = read_bounded(claim_dir / LIMITS_FILE_NAME, max_bytes=MAX_LIMITS_BYTES)
    except (OSError, StorageError):  # gone or damaged: nothing to report for it
        return {}
    return parse_limits(data.decode("ascii", "replace"))


def _device(entry: ClaimEntry, name: str, gpu: Gpu, limits: dict[GpuUUID, tuple[int, int]]) -> ClaimDevice:
    parsed = parse_device_name(name)
    if parsed.family is Family.VGPU:
        memory, cores = limits.get(gpu.uuid, (0, 0))
        return ClaimDevice(name, Family.VGPU, gpu.index, gpu.uuid, memory, cores / 100)
    if parsed.family is Family.MIG:
        record = next((m for m in entry.mig if m.device == name), None)
        profile = gpu.profile_by_name(parsed.profile or "")
        memory = profile.memory_mib * MIB if profile else 0
        ratio = profile.multiprocessors / gpu.multiprocessors if profile and gpu.multiprocessors else 0.0
        return ClaimDevice(
            name,
            Family.MIG,
            gpu.index,
            gpu.uuid,
            memory,
            ratio,
            mig_profile=parsed.profile,
            mig_uuid=record.uuid if record else None,
        )
    return ClaimDevice(name, Family.GPU, gpu.index, gpu.uuid, gpu.memory_bytes, 1.0)


def prepared_claims(
    checkpoint: Checkpoint, inventory: Inventory, claims_dir: Path
) -> tuple[PreparedClaim, ...]:
    """Every claim prepared on this node with its devices (those of our pool on GPUs the inventory has)."""
    out: list[PreparedClaim] = []
    for entry in sorted(checkpoint.claims.values(), key=lambda e: (e.namespace, e.name, e.uid)):
        if entry.state is not ClaimState.PREPARE_COMPLETED:
            continue
        claim_dir = claims_dir / entry.uid if entry.has_claim_dir else None
        limits = _limits(claim_dir) if claim_dir is not None else {}
        devices: list[ClaimDevice] = []
        for record in entry.devices:
            try:
                index = parse_device_name(record.device_name).index
            except InvalidNameError:
                continue
            gpu = inventory.gpu_by_index(index)
            if gpu is not None:
                devices.append(_device(entry, record.device_name, gpu, limits))
        region = claim_dir / REGION_FILE_NAME if claim_dir is not None else None
        out.append(PreparedClaim(entry.uid, entry.namespace, entry.name, tuple(devices), region))
    return tuple(out)
