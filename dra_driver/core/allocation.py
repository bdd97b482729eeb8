"""From an allocated ResourceClaim to a plan of what to prepare on this node (pure).

The claim arrives as the `kubernetes` client's v1 model; this module reads it through small protocols so it
needs no import of the client. Each allocated device is planned by its family (dra_driver/core/families); this
module finds our results, decodes the configs, and checks what spans the claim.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from typing import Any, Protocol

from dra_driver.core import config as cfg
from dra_driver.core import families
from dra_driver.core.families.base import NO_SETTINGS, Allocated, AnyPlanned, FamilySettings, NodeRecords
from dra_driver.libtessera.limits_file import LibraryLimits
from dra_driver.vocabulary.errors import ClaimError, ConfigError, InvalidNameError, NotAllocatedError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID, DeviceName, Family

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
class LibrarySettings:
    """The interception library's claim-wide settings (the limits file's head), when any device uses it."""

    policy: str
    log_level: int


@dataclass(frozen=True, slots=True)
class ClaimPlan:
    uid: ClaimUID
    namespace: str
    name: str
    pool: str
    devices: tuple[AnyPlanned, ...]
    library: LibrarySettings | None = None  # None: no device of the claim uses the interception library

    def of(self, family: Family) -> tuple[AnyPlanned, ...]:
        return tuple(d for d in self.devices if d.family == family)

    def families(self) -> tuple[Family, ...]:
        return tuple(dict.fromkeys(d.family for d in self.devices))

    def limits(self) -> tuple[LibraryLimits, ...]:
        """What the library enforces, one entry per device that uses it, in GPU order (each device's, as
        planned)."""
        out = [d.library_limits for d in self.devices if d.library_limits is not None]
        return tuple(sorted(out, key=lambda lim: lim.gpu_index))


@dataclass(frozen=True, slots=True)
class RecordsByFamily:
    """What the node records per family, for planning: the claim's own records and everyone else's."""

    claim: Mapping[Family, tuple[object, ...]] = field(default_factory=dict)
    others: Mapping[Family, tuple[object, ...]] = field(default_factory=dict)

    def of(self, family: Family) -> NodeRecords[Any]:
        return NodeRecords(claim=tuple(self.claim.get(family, ())), others=tuple(self.others.get(family, ())))


# ---- planning ---------------------------------------------------------------------------------------


def _our_results(
    claim: ClaimModel, *, driver: str, pool: str
) -> tuple[Sequence[ResultModel], DeviceAllocationModel]:
    allocation = claim.status.allocation if claim.status else None
    devices = allocation.devices if allocation else None
    if devices is None:
        raise NotAllocatedError("claim is not allocated (status.allocation.devices is empty)")
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


def _agreed(used: Sequence[tuple[AnyPlanned, LibraryLimits]], name: str, attr: str) -> object | None:
    """The one value the claim's library devices give a claim-wide setting (None: none has an opinion)."""
    first: tuple[object, str] | None = None
    for d, lim in used:
        value = getattr(lim, attr)
        if value is None:
            continue
        if first is None:
            first = (value, d.request)
        elif value != first[0]:
            raise ConfigError(
                f"request {d.request} sets {name} {value}, request {first[1]} sets {first[0]}: one claim's "
                "devices share one container and one interception library, so give them the same value"
            )
    return first[0] if first is not None else None


def _library_settings(devices: Sequence[AnyPlanned]) -> LibrarySettings | None:
    """The library's claim-wide settings, from the devices' planned limits, when any device uses it."""
    used = [(d, d.library_limits) for d in devices if d.library_limits is not None]
    if not used:
        return None
    policy, log_level = _agreed(used, "smLimitPolicy", "policy"), _agreed(used, "logLevel", "log_level")
    return LibrarySettings(
        policy=str(policy) if policy is not None else "default",
        log_level=log_level if isinstance(log_level, int) else 1,
    )


def _allocated(
    r: ResultModel,
    inventory: Inventory,
    decoded: Sequence[tuple[cfg.OpaqueConfig, cfg.DecodedConfig]],
    settings: FamilySettings,
) -> Allocated[Any, Any]:
    name, request = r.device or "", r.request or ""
    try:
        parsed = families.parse_device_name(name)
    except InvalidNameError as e:
        raise ClaimError(f"request {excerpt(request)}: {e}") from e
    gpu = inventory.gpu_by_index(parsed.index)
    if gpu is None:
        raise ClaimError(f"device {name} (request {request}): this node has no GPU with index {parsed.index}")
    return Allocated(
        request=request,
        device=DeviceName(name),
        detail=parsed.detail,
        gpu=gpu,
        share_id=r.share_id or None,
        consumed=dict(r.consumed_capacity or {}),
        config=cfg.resolve(decoded, request=request, family=parsed.family.name),
        settings=settings,
    )


def plan_claim(
    claim: ClaimModel,
    *,
    driver: str,
    pool: str,
    inventory: Inventory,
    recorded: RecordsByFamily = RecordsByFamily(),
    settings: FamilySettings = NO_SETTINGS,
) -> ClaimPlan:
    """Everything this node must do for the claim, or the first problem found, named."""
    meta = claim.metadata
    if meta is None or not meta.uid or not meta.name:
        raise ClaimError("claim has no metadata.uid/name")
    ours, devices = _our_results(claim, driver=driver, pool=pool)
    decoded = cfg.decode_all(_opaque_configs(devices, driver=driver))
    planned: list[AnyPlanned] = []
    for r in ours:
        d = _allocated(r, inventory, decoded, settings)
        f = families.parse_device_name(d.device).family
        p = f.plan(d, recorded.of(f.name))
        # the library's limits are asked of the family here, once: the limits file, the CDI spec's
        # variables and the claim-wide settings all read them from the plan
        planned.append(replace(p, library_limits=families.library_limits(p)))
    for f in families.FAMILIES:
        mine = [d for d in planned if d.family == f.name]
        if mine:
            f.check_claim(mine)
    return ClaimPlan(
        uid=ClaimUID(meta.uid),
        namespace=meta.namespace or "",
        name=meta.name,
        pool=pool,
        devices=tuple(planned),
        library=_library_settings(planned),
    )
