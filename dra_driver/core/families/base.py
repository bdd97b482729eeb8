"""The family seam: what every device family is to the rest of Tessera (pure). docs/architecture.md,
"The family seam".

A family (whole GPU, vgpu, MIG, MPS, ...) is one module in this package defining one `DeviceFamily`: which
devices it offers in a GPU's slice, how its device names read, its opaque-config kind, how an allocated device
plans, what the node records for it in the checkpoint, what the container gets (CDI edits), and what the
interception library enforces for it. What a family creates on the host (MIG instances, an MPS control daemon,
a GPU's sharing view) is its host part, `kubelet_plugin.hosts`, registered under the same name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any, ClassVar

from cdi.spec import ContainerEdits, DeviceNode
from dra_driver.core.config_schema import ConfigKind
from dra_driver.values.errors import ClaimError
from dra_driver.values.model import DeviceNode as HostNode
from dra_driver.values.model import Gpu, Inventory, MigInstance, Placement
from dra_driver.values.names import DeviceName, Family, GpuUUID

Json = dict[str, Any]  # a resource.k8s.io/v1 object in wire form


# ---- offering ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class GpuOffer:
    """One GPU as the slice builder hands it to each family."""

    gpu: Gpu
    inventory: Inventory
    # of the node's settings, what the families read (not all of NodeSettings: settings validate family
    # names against the registry, which imports this module)
    shares: int  # how many claims may share one GPU (vgpuShares; MPS takes at most its own maximum)
    mig_profiles: frozenset[str] | None  # the MIG profiles to publish (None: every profile)
    admin: tuple[MigInstance, ...]  # live MIG instances no Tessera claim holds: an administrator's
    counters: (
        Mapping[str, int] | None
    )  # the GPU's counter totals; None: degraded (whole GPUs only, no counters)

    def publishes_profile(self, profile: str) -> bool:
        return self.mig_profiles is None or profile in self.mig_profiles

    @property
    def shareable(self) -> bool:
        """Whether the GPU can be handed out whole or sliced in software: no administrator's instances on it,
        and MIG mode off or switchable off without a reset."""
        gpu = self.gpu
        return not self.admin and (not gpu.mig_enabled or gpu.architecture.can_toggle_mig_without_reset)


# ---- planning ----------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Allocated:
    """One device of ours in a claim's allocation, with what planning knows about it."""

    request: str
    device: DeviceName
    detail: object  # the family's reading of its part of the device name (`parse_name`)
    gpu: Gpu
    share_id: str | None
    consumed: Mapping[str, str]  # consumedCapacity ({} when the device has none)
    config: object  # the family's config, merged for this device's request

    def planned(self, family: Family, spec: object = None) -> PlannedDevice:
        """This device as `family` plans it, with the family's own plan in `spec`."""
        return PlannedDevice(
            request=self.request,
            device=self.device,
            family=family,
            gpu_index=self.gpu.index,
            gpu_uuid=self.gpu.uuid,
            share_id=self.share_id,
            config=self.config,
            spec=spec,
        )


@dataclass(frozen=True, slots=True)
class Held:
    """What the node already records for a family, so planning never books a thing twice."""

    claim: tuple[object, ...] = ()  # records of the claim being planned (it is prepared again)
    others: tuple[object, ...] = ()  # every other claim's, and those planned earlier in the same call


@dataclass(frozen=True, slots=True)
class PlannedDevice:
    request: str
    device: DeviceName
    family: Family
    gpu_index: int
    gpu_uuid: GpuUUID
    share_id: str | None
    config: object  # the family's config value
    spec: object = None  # the family's plan for it (limits, a MIG placement, ...)


@dataclass(frozen=True, slots=True)
class LibraryLimits:
    """What the interception library enforces for one device (interceptor/README.md, the limits file)."""

    gpu_index: int
    gpu_uuid: GpuUUID
    memory_bytes: int
    cores: int  # SM limit in percent; 0 = none
    priority: int = 1  # 0 high, 1 normal
    ceiling: int = 0  # SM share it may burst to in the GPU's idle time (above cores); 0: none
    time_sliced: bool = True  # takes a slot in the GPU's time-division schedule
    policy: str | None = None  # claim-wide SM limit policy (SmLimitPolicy value); None: no opinion
    log_level: int | None = None  # claim-wide library log level; None: no opinion


@dataclass(frozen=True, slots=True)
class Allotment:
    """What a prepared device holds of its GPU, as metrics and usage report it."""

    memory_bytes: int
    cores_ratio: float  # share of the GPU's SMs (1.0: all of them)
    mig_profile: str | None = None
    mig_uuid: str | None = None


@dataclass(frozen=True, slots=True)
class Footprint:
    """What of its GPU one allocated device takes, for the prepare side's own exclusivity check
    (dra_driver/core/exclusivity.py): the GPU's memory slices it covers, and whether other devices of its
    family may take the same slices at once (a multi-allocatable device: vgpu, MPS)."""

    family: Family
    slices: frozenset[int]
    shared: bool = False
    what: str = "a whole GPU"  # how an error names it: "a vGPU share", "MIG 1g.10gb at slice 3"

    def excludes(self, other: Footprint) -> bool:
        if self.shared and other.shared and self.family == other.family:
            return False
        return bool(self.slices & other.slices)


def all_slices(gpu: Gpu) -> frozenset[int]:
    """Every memory slice of the GPU (one for a GPU without MIG, which is then one indivisible slice)."""
    return frozenset(range(max(gpu.memory_slice_count, 1)))


def device_node(node: HostNode) -> DeviceNode:
    """A host character device as CDI names it; major/minor let the runtime skip stat() on the host."""
    return DeviceNode(path=node.path, host_path=node.path, type="c", major=node.major, minor=node.minor)


def not_in_mig_mode(d: Allocated, what: str) -> None:
    """A GPU an administrator put in MIG mode cannot be handed out whole or sliced in software."""
    if d.gpu.mig_enabled:
        raise ClaimError(
            f"device {d.device}: GPU {d.gpu.index} is in MIG mode, so it cannot be used as {what}"
        )


# ---- the protocol --------------------------------------------------------------------------------------


class DeviceFamily(ABC):
    """One family. Subclasses are stateless; the registry (`dra_driver.core.families`) holds one of each."""

    name: ClassVar[Family]
    config: ClassVar[ConfigKind]
    rank: ClassVar[int]  # publishing order within a GPU (lower first)
    # The family's group in the fragmentation-aware publishing order (dra_driver.core.device_order; lower
    # first).
    order_group: ClassVar[int]
    # The checkpoint entry's JSON key for this family's per-claim records (None: it records nothing).
    record_key: ClassVar[str | None] = None
    # The checkpoint's JSON key for GPUs whose state this family changed node-wide and must restore.
    owned_key: ClassVar[str | None] = None
    # What its DeviceClass (`<name>.tessera.dev`) selects, in a sentence: the generated class's comment
    # (dra_driver.core.device_classes).
    class_meaning: ClassVar[str]

    def class_profiles(self) -> tuple[str, ...]:
        """Profiles that get a DeviceClass each besides the family's (`<name>-<profile>.gpu.tessera.dev`,
        for extended resources); none by default."""
        return ()

    # -- names -----------------------------------------------------------------------------------------

    @abstractmethod
    def parse_name(self, part: str) -> object | None:
        """This family's reading of the part after `gpu-<index>` ("" for none), or None if not its own."""

    @abstractmethod
    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        """Every device this family could ever publish for the GPU (health reports cover them all)."""

    # -- the slice -------------------------------------------------------------------------------------

    @abstractmethod
    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        """The devices this family publishes for one GPU now (resource.k8s.io/v1 wire form)."""

    def order_key(self, device: Json, index: int) -> tuple[int, int, bool, int, int]:
        """The device's place within its group in the fragmentation-aware order (`index`: its GPU's). By
        default a sharing family's: pack from the first GPU upwards."""
        return (0, 0, False, index, 0)

    # -- planning --------------------------------------------------------------------------------------

    @abstractmethod
    def plan(self, d: Allocated, held: Held) -> PlannedDevice:
        """Plan one allocated device, or raise ClaimError/ConfigError naming the problem and the fix."""

    def footprint(self, detail: object, gpu: Gpu) -> Footprint:
        """What of the GPU a device of this family takes (`detail`: `parse_name`'s reading of its name). By
        default all of it, alone."""
        return Footprint(family=self.name, slices=all_slices(gpu))

    def check_claim(self, devices: Sequence[PlannedDevice]) -> None:  # noqa: B027 - optional, no rules
        """Rules across one claim's devices of this family (e.g. one GPU at most once)."""

    def records(self, devices: Sequence[PlannedDevice], held: Held) -> tuple[object, ...]:
        """What the checkpoint entry records for the claim's devices before anything is created."""
        return ()

    def placements(self, records: Sequence[object]) -> tuple[Placement, ...]:
        """MIG placements the records hold (they make live instances Tessera's, not an administrator's)."""
        return ()

    def record_gpus(self, records: Sequence[object]) -> frozenset[GpuUUID]:
        """The GPUs the records are about."""
        return frozenset()

    def slots(self, records: Sequence[object]) -> Mapping[GpuUUID, int]:
        """The claim's slot in each GPU's time-division schedule, from its records (the limits file names
        it)."""
        return {}

    def encode_record(self, record: object) -> Json:
        raise NotImplementedError(f"{self.name} records nothing")

    def decode_record(self, data: Mapping[str, Any]) -> object:
        """Raises ValueError naming the field on anything unexpected."""
        raise NotImplementedError(f"{self.name} records nothing")

    # -- what the container gets -------------------------------------------------------------------------

    def library(self, d: PlannedDevice) -> LibraryLimits | None:
        """What the interception library enforces for the device; None: the library is not injected for it."""
        return None

    def device_edits(self, d: PlannedDevice, gpu: Gpu, made: object) -> ContainerEdits:
        """The device's own CDI edits; `made` is what its host part created for it (None if nothing).
        By default the GPU's device node."""
        return ContainerEdits(device_nodes=(device_node(gpu.device_node),))

    def claim_edits(
        self, devices: Sequence[PlannedDevice], made: Mapping[DeviceName, object]
    ) -> ContainerEdits:
        """Edits once per claim for the family's devices in it."""
        return ContainerEdits()

    def status(self, d: PlannedDevice, made: object) -> Json:
        """What the claim's `status.devices[].data` says about the device besides its GPU (limits, MIG
        UUID)."""
        limits = self.library(d)
        if limits is None:
            return {}
        return {"limits": {"memory": f"{limits.memory_bytes >> 20}Mi", "cores": limits.cores}}

    def allotment(
        self, device: DeviceName, gpu: Gpu, records: Sequence[object], limited: tuple[int, int] | None
    ) -> Allotment:
        """What a prepared device holds, from the claim's records of this family and `limited`, the
        (memory bytes, cores %) line of the claim's limits file for the GPU (None: no line). By default the
        whole GPU."""
        return Allotment(gpu.memory_bytes, 1.0)

    def visible_id(self, d: PlannedDevice, made: object) -> str | None:
        """The CUDA_VISIBLE_DEVICES entry a device needs listed; a family returning one for any device makes
        the claim list every device (CUDA hides MIG instances that are not named)."""
        return None
