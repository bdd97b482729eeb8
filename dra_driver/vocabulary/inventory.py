"""The inventory: what a node's GPUs are and can do, as plain values.

Backends (NVML, simulated) produce these; the slice builder and the prepare logic consume them.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from enum import StrEnum

from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.names import GpuUUID

# The most GPUs one container can be given: the interception library's accounting region has 16 GPU entries
# (interceptor/src/region.h TR_MAX_GPUS, dra_driver/libtessera/region_layout.py), and no node Tessera runs on
# has more. The conversion refuses a larger HAMi/Volcano GPU count with this bound.
MAX_GPUS = 16


class Architecture(StrEnum):
    """NVML architecture codes mapped to names; order matters (MIG toggling needs Hopper or newer)."""

    KEPLER = "Kepler"
    MAXWELL = "Maxwell"
    PASCAL = "Pascal"
    VOLTA = "Volta"
    TURING = "Turing"
    AMPERE = "Ampere"
    ADA = "Ada"
    HOPPER = "Hopper"
    BLACKWELL = "Blackwell"
    UNKNOWN = "Unknown"

    @property
    def can_toggle_mig_without_reset(self) -> bool:
        return self in (Architecture.HOPPER, Architecture.BLACKWELL)


@dataclass(frozen=True, slots=True)
class MigProfile:
    """A GPU-instance profile as `nvidia-smi mig -lgip` shows it, with its possible placements."""

    profile_id: int  # NVML info.id: what placement, creation and listing take
    name: str  # canonical, e.g. "1g.10gb" or "1g.10gb+me"
    memory_mib: int
    multiprocessors: int
    compute_slices: int  # NVML sliceCount
    memory_slices: int  # placement size
    copy_engines: int
    decoders: int
    encoders: int
    jpeg_engines: int
    ofa_engines: int
    max_instances: int
    placement_starts: tuple[int, ...]


@dataclass(frozen=True, slots=True, order=True)
class Placement:
    """Where a MIG instance sits: the one type for a placement, whether offered, planned, live or recorded.

    Tessera owns a live instance exactly when a checkpoint record holds its placement."""

    gpu_uuid: GpuUUID
    profile_id: int
    start: int


@dataclass(frozen=True, slots=True)
class MigInstance:
    """A live GPU instance with its single compute instance."""

    parent_uuid: GpuUUID
    profile_id: int
    profile_name: str
    start: int
    size: int
    gi_id: int
    ci_id: int
    uuid: str  # "MIG-..."
    device_nodes: tuple[DeviceNode, ...] = ()  # /dev/nvidia-caps/nvidia-cap<N> for the GI and the CI

    @property
    def placement(self) -> Placement:
        return Placement(self.parent_uuid, self.profile_id, self.start)


class FaultKind(StrEnum):
    """What a backend saw go wrong with a GPU (dra_driver.core.gpu_health classifies them)."""

    XID = "xid"  # a critical XID event (NVIDIA's list, application XIDs left out)
    ECC_DBE = "ecc-dbe"  # a double-bit ECC error event
    LOST = "lost"  # the GPU is lost or has fallen off the bus (XID 79, NVML_ERROR_GPU_IS_LOST)
    NVML_ERROR = "nvml-error"  # NVML fails on the device
    REPORTED = "reported"  # the backend says so without a reason (a simulated node's `healthy: false`)


@dataclass(frozen=True, slots=True)
class GpuFault:
    kind: FaultKind
    xid: int | None = None  # the XID the fault came from, when it came from one
    detail: str = ""


@dataclass(frozen=True, slots=True)
class Fabric:
    """The GPU fabric a GPU has joined (NVML's nvmlGpuFabricInfo, state completed): GPUs of one clique of one
    cluster reach each other over NVLink, across nodes too (NVSwitch/IMEX systems)."""

    cluster_uuid: str
    clique_id: int


@dataclass(frozen=True, slots=True)
class NvLinks:
    """Where a GPU's active NVLinks end: at NVSwitches (HGX boards: every GPU of the board reaches every
    other) and/or directly at other GPUs (NVLink bridges on PCIe boards), named by their index."""

    switch: bool = False
    peers: tuple[int, ...] = ()


NO_NVLINK = NvLinks()


@dataclass(frozen=True, slots=True)
class Gpu:
    index: int  # NVML minor number: names and /dev/nvidia<minor>
    uuid: GpuUUID
    product_name: str
    brand: str
    architecture: Architecture
    cuda_compute_capability: str  # "9.0"
    memory_bytes: int
    multiprocessors: int
    pci_bus_id: str
    device_node: DeviceNode
    mig_capable: bool = False
    mig_enabled: bool = False  # current mode
    memory_slice_count: int = 0  # 8 on A100/H100/H200, 4 on A30; 0 without MIG
    copy_engines: int = 0
    decoders: int = 0
    encoders: int = 0
    jpeg_engines: int = 0
    ofa_engines: int = 0
    mig_profiles: tuple[MigProfile, ...] = ()
    mig_instances: tuple[MigInstance, ...] = ()
    healthy: bool = True
    faults: tuple[GpuFault, ...] = ()  # what the backend sees wrong now (health watcher, injected faults)
    # Topology (docs/topology.md); None where the node does not say (sysfs numa_node -1, no sysfs entry).
    pcie_root: str | None = None  # `pci<domain>:<bus>`, the PCIe root complex above the GPU
    numa_node: int | None = None
    numa_near: tuple[int, ...] = ()  # other NUMA nodes at the nearest SLIT distance (the list form)
    nvlinks: NvLinks = NO_NVLINK
    fabric: Fabric | None = None

    def profile_by_name(self, name: str) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.name == name), None)

    def profile_by_id(self, profile_id: int) -> MigProfile | None:
        return next((p for p in self.mig_profiles if p.profile_id == profile_id), None)


@dataclass(frozen=True, slots=True)
class Inventory:
    driver_version: str  # "550.54.15"
    cuda_driver_version: str  # "12.4"
    gpus: tuple[Gpu, ...]
    control_nodes: tuple[DeviceNode, ...] = field(default=())  # nvidiactl, nvidia-uvm, nvidia-uvm-tools
    # The host's memory (MemTotal), what backs memoryOversubscription's host-backed memory; None: not known.
    host_memory_bytes: int | None = None

    def gpu_by_index(self, index: int) -> Gpu | None:
        return next((g for g in self.gpus if g.index == index), None)

    def gpu_by_uuid(self, uuid: str) -> Gpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)

    def instance_at(self, placement: Placement) -> MigInstance | None:
        """The live MIG instance at a placement, if any."""
        gpu = self.gpu_by_uuid(placement.gpu_uuid)
        if gpu is None:
            return None
        return next((i for i in gpu.mig_instances if i.placement == placement), None)


@dataclass(frozen=True, slots=True)
class DriverMount:
    """One driver file for containers: where the host has it, and where the container gets it."""

    host_path: str
    container_path: str


@dataclass(frozen=True, slots=True)
class DriverFiles:
    """The driver's files a claim's container receives: for every claim, and by family name, the tools a
    family's claims get in addition (`DeviceFamily.driver_tools`: MPS's)."""

    common: tuple[DriverMount, ...] = ()
    tools: tuple[tuple[str, tuple[DriverMount, ...]], ...] = ()

    def of(self, family: str) -> tuple[DriverMount, ...]:
        return next((m for f, m in self.tools if f == family), ())


NO_DRIVER_FILES = DriverFiles()
