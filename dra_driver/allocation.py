"""From an allocated ResourceClaim to a plan of what to prepare on this node (pure).

The claim arrives as the `kubernetes` client's v1 model; this module reads it through small protocols so it
needs no import of the client. Limits for `vgpu` devices come only from `consumedCapacity`.
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from decimal import Decimal, InvalidOperation
from enum import StrEnum
from typing import Protocol

from dra_driver import config as cfg
from dra_driver.errors import ClaimError, ConfigError, InvalidNameError, PlacementTakenError
from dra_driver.excerpt import excerpt
from dra_driver.model import Gpu, Inventory, MigInstance, MigProfile
from dra_driver.names import (
    Cap,
    ClaimUID,
    DeviceName,
    Family,
    GpuUUID,
    parse_device_name,
    qualified,
)

MIB = 1 << 20

# ---- the parts of the kubernetes v1 model this module reads ----------------------------------------


class ResultModel(Protocol):
    @property
    def request(self) -> str | None: ...
    @property
    def driver(self) -> str | None: ...
    @property
    def pool(self) -> str | None: ...
    @property
    def device(self) -> str | None: ...
    @property
    def share_id(self) -> str | None: ...
    @property
    def consumed_capacity(self) -> Mapping[str, str] | None: ...


class OpaqueModel(Protocol):
    @property
    def driver(self) -> str | None: ...
    @property
    def parameters(self) -> object: ...


class ConfigModel(Protocol):
    @property
    def source(self) -> str | None: ...
    @property
    def requests(self) -> Sequence[str] | None: ...
    @property
    def opaque(self) -> OpaqueModel | None: ...


class DeviceAllocationModel(Protocol):
    @property
    def results(self) -> Sequence[ResultModel] | None: ...
    @property
    def config(self) -> Sequence[ConfigModel] | None: ...


class AllocationModel(Protocol):
    @property
    def devices(self) -> DeviceAllocationModel | None: ...


class StatusModel(Protocol):
    @property
    def allocation(self) -> AllocationModel | None: ...


class MetaModel(Protocol):
    @property
    def name(self) -> str | None: ...
    @property
    def namespace(self) -> str | None: ...
    @property
    def uid(self) -> str | None: ...


class ClaimModel(Protocol):
    """`kubernetes.client.ResourceV1ResourceClaim`, as far as planning reads it."""

    @property
    def metadata(self) -> MetaModel | None: ...
    @property
    def status(self) -> StatusModel | None: ...


# ---- the plan ---------------------------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class VgpuPolicy:
    """The request policy published for the vgpu device's capacities (see DESIGN.md)."""

    memory_min: int = MIB
    memory_step: int = MIB
    cores_max: int = 100


@dataclass(frozen=True, slots=True)
class VgpuLimits:
    memory_bytes: int
    cores: int  # 0 = no SM limit


@dataclass(frozen=True, slots=True)
class PlacementKey:
    """A MIG placement; Tessera owns an instance iff its placement is recorded in the checkpoint."""

    gpu_uuid: GpuUUID
    profile_id: int
    start: int


class MigAction(StrEnum):
    CREATE = "create"  # Tessera creates (or, rolling forward, reuses) an instance at the placement
    STATIC = "static"  # an administrator's instance already sits exactly there: use it, never destroy it


@dataclass(frozen=True, slots=True)
class MigPlan:
    key: PlacementKey
    profile_name: str
    size: int
    action: MigAction
    instance: MigInstance | None = None  # the live instance for STATIC


@dataclass(frozen=True, slots=True)
class PlannedDevice:
    request: str
    device: DeviceName
    family: Family
    gpu_index: int
    gpu_uuid: GpuUUID
    share_id: str | None
    config: cfg.DeviceConfig
    limits: VgpuLimits | None = None
    mig: MigPlan | None = None


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    uid: ClaimUID
    namespace: str
    name: str
    pool: str
    devices: tuple[PlannedDevice, ...]
    vgpu: cfg.VgpuConfig | None  # the claim-wide vgpu settings; None without vgpu devices
    enable_mig_mode: tuple[GpuUUID, ...]  # GPUs whose MIG mode Tessera must switch on first

    @property
    def mig_placements(self) -> tuple[MigPlan, ...]:
        return tuple(d.mig for d in self.devices if d.mig is not None)


# ---- quantities -------------------------------------------------------------------------------------

_QUANTITY_RE = re.compile(r"^([+-]?(?:\d+\.?\d*|\.\d+))(Ki|Mi|Gi|Ti|Pi|Ei|[eE][+-]?\d+|[numkMGTPE])?$")
_SUFFIX = {
    "Ki": Decimal(1 << 10),
    "Mi": Decimal(1 << 20),
    "Gi": Decimal(1 << 30),
    "Ti": Decimal(1 << 40),
    "Pi": Decimal(1 << 50),
    "Ei": Decimal(1 << 60),
    "n": Decimal("1e-9"),
    "u": Decimal("1e-6"),
    "m": Decimal("1e-3"),
    "k": Decimal(10**3),
    "M": Decimal(10**6),
    "G": Decimal(10**9),
    "T": Decimal(10**12),
    "P": Decimal(10**15),
    "E": Decimal(10**18),
}


def parse_quantity(text: object) -> Decimal:
    """A Kubernetes resource.Quantity string ("20Gi", "1.5G", "50", "500m", "1e3") as an exact Decimal."""
    if isinstance(text, bool) or not isinstance(text, str | int):
        raise ValueError(f"{excerpt(text)} is not a quantity")
    m = _QUANTITY_RE.match(str(text).strip())
    if m is None:
        raise ValueError(f"{excerpt(text)} is not a quantity")
    try:
        number = Decimal(m.group(1))
    except InvalidOperation as e:
        raise ValueError(f"{excerpt(text)} is not a quantity") from e
    suffix = m.group(2)
    if suffix is None:
        return number
    if suffix[0] in "eE" and len(suffix) > 1:
        return number.scaleb(int(suffix[1:]))
    return number * _SUFFIX[suffix]


# ---- planning ---------------------------------------------------------------------------------------


def _capacity(consumed: Mapping[str, str], name: str) -> object | None:
    # Capacity names may be published bare (domain implied) or qualified with the driver's domain.
    if name in consumed:
        return consumed[name]
    return consumed.get(qualified(name))


def vgpu_limits(
    result: ResultModel, *, device: str, gpu: Gpu, policy: VgpuPolicy = VgpuPolicy()
) -> VgpuLimits:
    consumed = result.consumed_capacity
    if not consumed:
        raise ClaimError(
            f"vgpu device {device} (request {result.request}) has no consumedCapacity in the allocation; "
            "the API server needs the DRAConsumableCapacity feature, and the claim must be re-allocated"
        )
    values: dict[str, int] = {}
    for name in (Cap.MEMORY, Cap.CORES):
        raw = _capacity(consumed, name)
        if raw is None:
            raise ClaimError(
                f"vgpu device {device}: consumedCapacity has no {name!r} (got {excerpt(sorted(consumed))})"
            )
        try:
            amount = parse_quantity(raw)
        except ValueError as e:
            raise ClaimError(
                f"vgpu device {device}: consumedCapacity {name} {excerpt(raw)} is not a quantity"
            ) from e
        if amount != amount.to_integral_value():
            raise ClaimError(
                f"vgpu device {device}: consumedCapacity {name} {excerpt(raw)} is not a whole number"
            )
        values[name] = int(amount)
    memory, cores = values[Cap.MEMORY], values[Cap.CORES]
    if not policy.memory_min <= memory <= gpu.memory_bytes or memory % policy.memory_step:
        raise ClaimError(
            f"vgpu device {device}: consumed memory {memory} bytes is outside the device's policy "
            f"({policy.memory_min}…{gpu.memory_bytes} in steps of {policy.memory_step})"
        )
    if not 0 <= cores <= policy.cores_max:
        raise ClaimError(
            f"vgpu device {device}: consumed cores {cores} is outside the device's policy "
            f"(0…{policy.cores_max})"
        )
    return VgpuLimits(memory_bytes=memory, cores=cores)


def _overlaps(a_start: int, a_size: int, b_start: int, b_size: int) -> bool:
    return a_start < b_start + b_size and b_start < a_start + a_size


def mig_plan(
    *,
    device: str,
    gpu: Gpu,
    profile_name: str,
    start: int,
    own: frozenset[PlacementKey],
    tessera: frozenset[PlacementKey],
) -> MigPlan:
    """Where the instance comes from: created by Tessera, reused (rolling forward), or an admin's static one.

    `own`: placements this claim's checkpoint entry already records; `tessera`: every recorded placement.
    """
    profile: MigProfile | None = gpu.profile_by_name(profile_name)
    if not gpu.mig_capable or profile is None:
        raise ClaimError(
            f"device {device}: GPU {gpu.index} ({gpu.product_name}) has no MIG profile {profile_name}"
        )
    if start not in profile.placement_starts:
        raise ClaimError(
            f"device {device}: {profile_name} cannot start at memory slice {start} "
            f"(possible starts: {list(profile.placement_starts)})"
        )
    key = PlacementKey(gpu_uuid=gpu.uuid, profile_id=profile.profile_id, start=start)
    if key in tessera and key not in own:
        raise PlacementTakenError(
            f"device {device}: MIG placement {profile_name}@{start} on GPU {gpu.index} is held by "
            "another prepared claim; unprepare it first"
        )
    for inst in gpu.mig_instances:
        here = PlacementKey(inst.parent_uuid, inst.profile_id, inst.start)
        if here == key:
            if key in own:
                return MigPlan(key, profile.name, profile.memory_slices, MigAction.CREATE)
            return MigPlan(key, profile.name, profile.memory_slices, MigAction.STATIC, inst)
        if _overlaps(start, profile.memory_slices, inst.start, inst.size):
            owner = "another prepared claim" if here in tessera else "an administrator"
            raise PlacementTakenError(
                f"device {device}: MIG placement {profile_name}@{start} on GPU {gpu.index} overlaps instance "
                f"{inst.profile_name}@{inst.start} ({inst.uuid}) created by {owner}; "
                "destroy that instance or let the scheduler pick another placement"
            )
    return MigPlan(key, profile.name, profile.memory_slices, MigAction.CREATE)


def _our_results(
    claim: ClaimModel, *, driver: str, pool: str
) -> tuple[Sequence[ResultModel], DeviceAllocationModel]:
    allocation = claim.status.allocation if claim.status else None
    devices = allocation.devices if allocation else None
    if devices is None:
        raise ClaimError("claim is not allocated (status.allocation.devices is empty)")
    ours = [r for r in devices.results or () if r.driver == driver]
    if not ours:
        raise ClaimError(f"claim has no allocation results for driver {driver}")
    for r in ours:
        if r.pool != pool:
            raise ClaimError(
                f"device {excerpt(r.device)} (request {excerpt(r.request)}) is allocated from pool "
                f"{excerpt(r.pool)}, "
                f"but this node's pool is {pool!r}: the claim belongs to another node"
            )
    return ours, devices


def _opaque_configs(devices: DeviceAllocationModel, *, driver: str) -> tuple[cfg.OpaqueConfig, ...]:
    entries: list[cfg.OpaqueConfig] = []
    for i, c in enumerate(devices.config or ()):
        if c.opaque is None or c.opaque.driver != driver:
            continue
        source = cfg.ConfigSource.FROM_CLASS if c.source == "FromClass" else cfg.ConfigSource.FROM_CLAIM
        entries.append(cfg.OpaqueConfig(source, tuple(c.requests or ()), c.opaque.parameters, i))
    return cfg.ordered(entries)


def _claim_vgpu_config(devices: Sequence[PlannedDevice]) -> cfg.VgpuConfig | None:
    configs = [(d.request, d.config) for d in devices if isinstance(d.config, cfg.VgpuConfig)]
    if not configs:
        return None
    first_request, first = configs[0]
    for request, other in configs[1:]:
        if other != first:
            raise ConfigError(
                f"VgpuConfig for request {request} differs from request {first_request}: one claim's vgpu "
                "devices share one container, so give them the same smLimitPolicy, priority and logLevel"
            )
    return first


def plan_claim(
    claim: ClaimModel,
    *,
    driver: str,
    pool: str,
    inventory: Inventory,
    own_placements: frozenset[PlacementKey] = frozenset(),
    tessera_placements: frozenset[PlacementKey] = frozenset(),
    vgpu_policy: VgpuPolicy = VgpuPolicy(),
) -> ClaimPlan:
    """Everything this node must do for the claim, or the first problem found, named."""
    meta = claim.metadata
    if meta is None or not meta.uid or not meta.name:
        raise ClaimError("claim has no metadata.uid/name")
    ours, devices = _our_results(claim, driver=driver, pool=pool)
    decoded = cfg.decode_all(_opaque_configs(devices, driver=driver))
    planned: list[PlannedDevice] = []
    seen_mig: set[PlacementKey] = set()
    seen_vgpu: set[int] = set()
    enable: list[GpuUUID] = []
    for r in ours:
        name, request = r.device or "", r.request or ""
        try:
            parsed = parse_device_name(name)
        except InvalidNameError as e:
            raise ClaimError(f"request {excerpt(request)}: {e}") from e
        gpu = inventory.gpu_by_index(parsed.index)
        if gpu is None:
            raise ClaimError(
                f"device {name} (request {request}): this node has no GPU with index {parsed.index}"
            )
        device_config = cfg.resolve(decoded, request=request, family=parsed.family)
        limits, mig = None, None
        if parsed.family is Family.MIG:
            assert parsed.profile is not None and parsed.start is not None
            mig = mig_plan(
                device=name,
                gpu=gpu,
                profile_name=parsed.profile,
                start=parsed.start,
                own=own_placements,
                tessera=tessera_placements,
            )
            if mig.key in seen_mig:
                raise ClaimError(f"device {name} is allocated twice in one claim")
            seen_mig.add(mig.key)
            if mig.action is MigAction.CREATE and not gpu.mig_enabled and gpu.uuid not in enable:
                if not gpu.architecture.can_toggle_mig_without_reset:
                    raise ClaimError(
                        f"device {name}: GPU {gpu.index} ({gpu.architecture.value}) has MIG mode off and "
                        "cannot switch it on without a reset; an administrator must enable MIG mode"
                    )
                enable.append(gpu.uuid)
        elif gpu.mig_enabled:
            raise ClaimError(
                f"device {name}: GPU {gpu.index} is in MIG mode, so it cannot be used as a whole GPU or vGPU"
            )
        elif parsed.family is Family.VGPU:
            if gpu.index in seen_vgpu:
                # The limits file has one line per GPU; two shares of one GPU in one container would merge.
                raise ClaimError(f"device {name} is allocated to two requests of one claim; use one request")
            seen_vgpu.add(gpu.index)
            limits = vgpu_limits(r, device=name, gpu=gpu, policy=vgpu_policy)
        planned.append(
            PlannedDevice(
                request=request,
                device=DeviceName(name),
                family=parsed.family,
                gpu_index=gpu.index,
                gpu_uuid=gpu.uuid,
                share_id=r.share_id or None,
                config=device_config,
                limits=limits,
                mig=mig,
            )
        )
    return ClaimPlan(
        uid=ClaimUID(meta.uid),
        namespace=meta.namespace or "",
        name=meta.name,
        pool=pool,
        devices=tuple(planned),
        vgpu=_claim_vgpu_config(planned),
        enable_mig_mode=tuple(enable),
    )
