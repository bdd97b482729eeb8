"""The MPS family: a share of a GPU run by NVIDIA's Multi-Process Service (pure). Device `gpu-<i>-mps`,
DeviceClass `mps.tessera.dev`, config kind `MpsConfig`. docs/mps.md.

One multi-allocatable device per GPU (Volta or newer), with the same consumable capacity as `vgpu`: every
claim takes one share with the memory and SM share it asks for, and consumes the GPU's counters, so MPS, vgpu,
whole GPUs and MIG exclude each other on one GPU through the scheduler. The claims on a GPU are clients of one
MPS control daemon (the host part, kubelet_plugin/host_parts/mps/__init__.py) and run concurrently: `cores`
becomes the client's active thread percentage and `memory` its pinned device memory limit, and the
interception library accounts the claim's memory exactly (it sets no SM limit of its own: MPS divides the
SMs).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.core.config_schema import ConfigField, ConfigKind
from dra_driver.core.families.base import (
    Allocated,
    Allotment,
    GpuOffer,
    Json,
    NodeRecords,
    PlannedDevice,
    SliceOccupancy,
    Unnamed,
    not_in_mig_mode,
)
from dra_driver.core.families.capacity import (
    SHARES,
    SharedLimits,
    limits_status,
    shared_device,
    shared_limits,
    shared_occupancy,
)
from dra_driver.core.families.protocol import ClaimWide, DeviceFamily, LibraryLimited, Recording
from dra_driver.libtessera.limits_file import GpuLimitLine, LibraryLimits
from dra_driver.vocabulary.container import ContainerEdits, Mount
from dra_driver.vocabulary.errors import ClaimError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import Gpu
from dra_driver.vocabulary.names import DeviceName, Family, GpuUUID, gpu_device_name

NAME = Family("mps")
_PART = "mps"
MIN_COMPUTE_CAPABILITY = 7  # Volta: a GPU address space per client, 48 clients per GPU
MAX_CLIENTS = 48
CONTAINER_MPS_ROOT = "/var/run/tessera/mps"  # where a GPU's MPS pipe directory appears in a container

CONTROL_TOOL = "nvidia-cuda-mps-control"  # runs a GPU's control daemon (the host part starts it)
SERVER_TOOL = "nvidia-cuda-mps-server"  # started by the control daemon for each client's user

PIPE_DIRECTORY_ENV = "CUDA_MPS_PIPE_DIRECTORY"
THREAD_PERCENTAGE_ENV = "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE"
PINNED_MEMORY_ENV = "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT"


def container_pipe_dir(gpu_uuid: GpuUUID) -> str:
    return f"{CONTAINER_MPS_ROOT}/{gpu_uuid}"


@dataclass(frozen=True, slots=True)
class MpsConfig:
    log_level: int = 1  # the interception library's: 0 errors only … 4 trace


@dataclass(frozen=True, slots=True)
class MpsClient:
    """An MPS claim's record: the GPU whose control daemon its containers are clients of."""

    gpu_uuid: GpuUUID
    cores: int = 0  # its active thread percentage (0: none set); records from before it read as 0


@dataclass(frozen=True, slots=True)
class MpsPipe:
    """What the host part made for a device: the host path of the claim's client directory for its GPU's MPS
    control daemon (a link to the daemon's `control` socket; kubelet_plugin/host_parts/mps/clients.py)."""

    host_dir: str


def _supported(gpu: Gpu) -> bool:
    major = gpu.cuda_compute_capability.split(".", 1)[0]
    return major.isdigit() and int(major) >= MIN_COMPUTE_CAPABILITY


Planned = PlannedDevice[MpsConfig, SharedLimits]


class Mps(
    DeviceFamily[MpsConfig, Unnamed, SharedLimits, MpsClient, MpsPipe],
    Recording[MpsConfig, SharedLimits, MpsClient],
    LibraryLimited[MpsConfig, SharedLimits],
    ClaimWide[MpsConfig, SharedLimits, MpsPipe],
):
    name = NAME
    rank = 20
    order_group = 1
    config = ConfigKind(
        kind="MpsConfig",
        family=NAME,
        type=MpsConfig,
        meaning="a share of a GPU run by NVIDIA MPS",
        fields=(
            ConfigField(
                name="logLevel",
                attr="log_level",
                meaning="the interception library's log level: 0 errors only … 4 trace",
                default=1,
                minimum=0,
                maximum=4,
            ),
        ),
    )
    record_key = "mps"
    driver_tools = (CONTROL_TOOL, SERVER_TOOL)
    class_meaning = (
        "a share of a GPU run by NVIDIA MPS (memory and SM share from capacity.requests; the claims on one "
        "GPU run concurrently as clients of its MPS control daemon). docs/mps.md."
    )

    def parse_name(self, part: str) -> Unnamed | None:
        return () if part == _PART else None

    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        return (gpu_device_name(gpu.index, _PART),) if _supported(gpu) else ()

    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        if not o.shareable or o.counters is None or not _supported(o.gpu):
            return ()
        shares = min(o.setting(SHARES), MAX_CLIENTS)
        return (shared_device(o, family=NAME, part=_PART, shares=shares),)

    def occupancy(self, detail: Unnamed, gpu: Gpu) -> SliceOccupancy:
        return shared_occupancy(gpu, family=NAME, what="an MPS share")

    def plan(self, d: Allocated[MpsConfig], recorded: NodeRecords[MpsClient]) -> Planned:
        not_in_mig_mode(d, "an MPS share")
        if not _supported(d.gpu):
            raise ClaimError(
                f"device {d.device}: GPU {d.gpu.index} (compute capability "
                f"{d.gpu.cuda_compute_capability}) is older than Volta; MPS devices need compute capability "
                f"{MIN_COMPUTE_CAPABILITY}.0 or newer"
            )
        return d.planned(NAME, shared_limits(d, family=NAME))

    def check_claim(self, devices: Sequence[Planned]) -> None:
        if len(devices) > 1:
            names = ", ".join(d.device for d in devices)
            raise ClaimError(
                f"devices {names}: a claim may hold one MPS device, because a CUDA process is a client of "
                "one MPS control daemon (one GPU); use one claim per GPU"
            )

    def records(self, devices: Sequence[Planned], recorded: NodeRecords[MpsClient]) -> tuple[MpsClient, ...]:
        return tuple(MpsClient(d.gpu_uuid, d.spec.cores) for d in devices)

    def record_gpus(self, records: Sequence[MpsClient]) -> frozenset[GpuUUID]:
        return frozenset(r.gpu_uuid for r in records)

    def encode_record(self, record: MpsClient) -> Json:
        return {"gpuUUID": record.gpu_uuid, "cores": record.cores}

    def decode_record(self, data: Mapping[str, Any]) -> MpsClient:
        uuid = data.get("gpuUUID")
        if not isinstance(uuid, str) or not uuid:
            raise ValueError(f"an MPS record needs a string 'gpuUUID', got {excerpt(uuid)}")
        cores = data.get("cores", 0)
        if not isinstance(cores, int) or isinstance(cores, bool) or not 0 <= cores <= 100:
            raise ValueError(
                f"field 'cores' of an MPS record must be an integer from 0 to 100, got {excerpt(cores)}"
            )
        return MpsClient(GpuUUID(uuid), cores)

    def allotment(
        self, device: DeviceName, gpu: Gpu, records: Sequence[MpsClient], limited: GpuLimitLine | None
    ) -> Allotment:
        # the library holds the memory limit; MPS holds the SM share (0: the client may use every SM)
        cores = next((r.cores for r in records if r.gpu_uuid == gpu.uuid), 0)
        memory = limited.memory_bytes if limited is not None else gpu.memory_bytes
        return Allotment(memory, cores / 100 if cores else 1.0)

    def library(self, d: Planned) -> LibraryLimits:
        limits, config = d.spec, d.config
        # the library accounts memory exactly and shows it to nvidia-smi; MPS divides the SMs, so no SM limit
        return LibraryLimits(
            gpu_index=d.gpu_index,
            gpu_uuid=d.gpu_uuid,
            memory_bytes=limits.memory_bytes,
            cores=0,
            time_sliced=False,
            log_level=config.log_level,
        )

    def status(self, d: Planned, made: MpsPipe | None) -> Json:
        return limits_status(d.spec)

    def claim_edits(self, devices: Sequence[Planned], made: Mapping[DeviceName, MpsPipe]) -> ContainerEdits:
        (d,) = devices  # check_claim allows one
        pipe = made.get(d.device)
        if pipe is None:
            raise ClaimError(f"device {d.device}: no MPS control daemon was started for it")
        limits = d.spec
        inside = container_pipe_dir(d.gpu_uuid)
        # the daemon serves one GPU (CUDA_VISIBLE_DEVICES=<its UUID>): its clients see it as device 0
        env = [f"{PIPE_DIRECTORY_ENV}={inside}", f"{PINNED_MEMORY_ENV}=0={limits.memory_bytes >> 20}M"]
        if limits.cores:
            env.append(f"{THREAD_PERCENTAGE_ENV}={limits.cores}")
        # the claim's own client directory (a link to the daemon's control socket, nothing else), read-only:
        # a root process in the container can connect, but not replace the socket or reach the daemon's
        # privileged one (docs/mps.md, "Who may command the daemon")
        mount = Mount(
            host_path=pipe.host_dir, container_path=inside, options=("ro", "nosuid", "nodev", "bind")
        )
        return ContainerEdits(env=tuple(env), mounts=(mount,))


FAMILY = Mps()
