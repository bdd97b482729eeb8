"""The family seam: what every device family is to the rest of Tessera (pure). docs/architecture.md,
"The family seam".

A family (whole GPU, vgpu, MIG, MPS, ...) is one module in this package defining one `FAMILY`: a
`DeviceFamily` (names, the devices it offers in a GPU's slice, how an allocated device plans, what of its GPU
a device takes, what the container gets) that opts into the capabilities below it needs. Each part is typed
by the family's own config, name reading, plan, record and host-made types (base.py), so a family reads its
own values without casting; the callers, which hold every family at once, see them as `AnyFamily`.

What a family creates on the host (MIG instances, an MPS control daemon, a GPU's sharing view) is its host
part, `kubelet_plugin.host_parts`, registered under the same name.
"""

from __future__ import annotations

from abc import ABC, abstractmethod
from collections.abc import Mapping, Sequence
from typing import Any, ClassVar, Generic

from dra_driver.core.config_schema import ConfigKind
from dra_driver.core.families.base import (
    Allocated,
    Allotment,
    ClassVariant,
    ConfigT,
    DetailT,
    GpuOffer,
    Json,
    MadeT,
    NodeRecords,
    NodeSetting,
    PlannedDevice,
    RecordT,
    SliceOccupancy,
    SpecT,
    all_slices,
)
from dra_driver.libtessera.limits_file import GpuLimitLine, LibraryLimits
from dra_driver.vocabulary.container import ContainerEdits
from dra_driver.vocabulary.inventory import Gpu, Placement
from dra_driver.vocabulary.names import DeviceName, Family, GpuUUID

OrderKey = tuple[int, int, bool, int, int]


class DeviceFamily(ABC, Generic[ConfigT, DetailT, SpecT, RecordT, MadeT]):
    """What every family has. Subclasses are stateless; the registry (`dra_driver.core.families`) holds one
    of each."""

    name: ClassVar[Family]
    config: ClassVar[ConfigKind]
    rank: ClassVar[int]  # publishing order within a GPU (lower first)
    # The family's group in the fragmentation-aware publishing order (dra_driver.core.device_order; lower
    # first).
    order_group: ClassVar[int]
    # What its DeviceClass (`<name>.tessera.dev`) selects, in a sentence: the generated class's comment
    # (dra_driver.core.device_classes).
    class_meaning: ClassVar[str]
    # The NodeSettings fields the family reads (dra_driver.core.settings decodes them with these).
    settings: ClassVar[tuple[NodeSetting[Any], ...]] = ()
    # DeviceClasses besides its own that select some of its devices and set a config (vgpu's
    # `vgpu-oversubscribed`; dra_driver.core.device_classes)
    class_variants: ClassVar[tuple[ClassVariant, ...]] = ()
    # The driver's tools a container of the family's claims gets besides every claim's (MPS's server and
    # control, found below the driver root: dra_driver.io.driver_root).
    driver_tools: ClassVar[tuple[str, ...]] = ()

    def class_profiles(self) -> tuple[str, ...]:
        """Profiles that get a DeviceClass each besides the family's (`<name>-<profile>.gpu.tessera.dev`,
        for extended resources); none by default."""
        return ()

    @abstractmethod
    def parse_name(self, part: str) -> DetailT | None:
        """This family's reading of the part after `gpu-<index>` ("" for none), or None if not its own."""

    @abstractmethod
    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        """Every device this family could ever publish for the GPU (health reports cover them all)."""

    @abstractmethod
    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        """The devices this family publishes for one GPU now (resource.k8s.io/v1 wire form)."""

    @abstractmethod
    def plan(
        self, d: Allocated[ConfigT, DetailT], recorded: NodeRecords[RecordT]
    ) -> PlannedDevice[ConfigT, SpecT]:
        """Plan one allocated device, or raise ClaimError/ConfigError naming the problem and the fix."""

    def occupancy(self, detail: DetailT, gpu: Gpu) -> SliceOccupancy:
        """What of the GPU a device of this family takes. By default all of it, alone."""
        return SliceOccupancy(family=self.name, slices=all_slices(gpu))

    def check_claim(self, devices: Sequence[PlannedDevice[ConfigT, SpecT]]) -> None:
        """Rules across one claim's devices of this family (e.g. one GPU at most once)."""

    def device_edits(self, d: PlannedDevice[ConfigT, SpecT], gpu: Gpu, made: MadeT | None) -> ContainerEdits:
        """The device's own CDI edits; `made` is what its host part created for it (None if nothing).
        By default the GPU's device node."""
        return ContainerEdits(device_nodes=(gpu.device_node,))

    def status(self, d: PlannedDevice[ConfigT, SpecT], made: MadeT | None) -> Json:
        """What the claim's `status.devices[].data` says about the device besides its GPU (limits, MIG
        UUID); nothing by default."""
        return {}


AnyFamily = DeviceFamily[Any, Any, Any, Any, Any]


# ---- capabilities a family opts into ---------------------------------------------------------------------


class Capability(ABC):
    """A part of the protocol a family opts into by subclassing it; the registry lists who has it
    (`families.recording()`, `placing()`, `time_sliced()`, `claim_wide()`; `library_limits(d)` for a device),
    and a caller holding one family asks with `isinstance`."""

    name: ClassVar[Family]  # the family's (DeviceFamily.name)


class Recording(Capability, Generic[ConfigT, SpecT, RecordT]):
    """The family records per-claim state in the node's checkpoint (a time-division slot, a MIG placement)."""

    record_key: ClassVar[str]  # the checkpoint entry's JSON key for its records (on-disk format)

    @abstractmethod
    def records(
        self, devices: Sequence[PlannedDevice[ConfigT, SpecT]], recorded: NodeRecords[RecordT]
    ) -> tuple[RecordT, ...]:
        """What the checkpoint entry records for the claim's devices before anything is created."""

    @abstractmethod
    def record_gpus(self, records: Sequence[RecordT]) -> frozenset[GpuUUID]:
        """The GPUs the records are about."""

    @abstractmethod
    def encode_record(self, record: RecordT) -> Json: ...

    @abstractmethod
    def decode_record(self, data: Mapping[str, Any]) -> RecordT:
        """Raises ValueError naming the field on anything unexpected."""

    def allotment(
        self, device: DeviceName, gpu: Gpu, records: Sequence[RecordT], limited: GpuLimitLine | None
    ) -> Allotment:
        """What a prepared device holds, from the claim's records of this family and `limited`, the line of
        the claim's limits file for the GPU as read back (None: no line). By default the whole GPU, as for a
        family that records nothing."""
        return whole_gpu(gpu)


def whole_gpu(gpu: Gpu) -> Allotment:
    return Allotment(gpu.memory_bytes, 1.0)


class LibraryLimited(Capability, Generic[ConfigT, SpecT]):
    """The interception library is injected for the family's devices and enforces these limits."""

    @abstractmethod
    def library(self, d: PlannedDevice[ConfigT, SpecT]) -> LibraryLimits: ...


class TimeSliced(Recording[ConfigT, SpecT, RecordT]):
    """The family's claims take slots in their GPU's time-division schedule (the limits file names them)."""

    @abstractmethod
    def slots(self, records: Sequence[RecordT]) -> Mapping[GpuUUID, int]: ...


class Placing(Recording[ConfigT, SpecT, RecordT]):
    """The family's records hold MIG placements, which make live instances Tessera's, not an
    administrator's; and it changes GPU-wide state (MIG mode) that it restores after its last claim."""

    owned_key: ClassVar[str]  # the checkpoint's JSON key for the GPUs whose state it changed

    @abstractmethod
    def placements(self, records: Sequence[RecordT]) -> tuple[Placement, ...]: ...


class ClaimWide(Capability, Generic[ConfigT, SpecT, MadeT]):
    """The family adds edits once per claim for its devices in it."""

    @abstractmethod
    def claim_edits(
        self, devices: Sequence[PlannedDevice[ConfigT, SpecT]], made: Mapping[DeviceName, MadeT]
    ) -> ContainerEdits: ...


class NamedVisible(Capability, Generic[ConfigT, SpecT, MadeT]):
    """CUDA sees the family's devices only when CUDA_VISIBLE_DEVICES names them (MIG instances): a claim with
    one lists every device."""

    @abstractmethod
    def visible_id(self, d: PlannedDevice[ConfigT, SpecT], made: MadeT | None) -> str: ...


class Ordered(Capability):
    """The family's own place for a device within its group of the fragmentation-aware order
    (dra_driver.core.device_order); without it, a sharing family's: packed from the first GPU upwards."""

    @abstractmethod
    def order_key(self, device: Json, index: int) -> OrderKey: ...
