"""A node's devices, counter sets and current allocations, read from ResourceSlice and ResourceClaim objects.

Input is the API's JSON shape (camelCase dicts, as `kubectl get -o yaml` shows it); names are qualified with
the driver's domain where the API leaves them short, so every later lookup uses one spelling.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any

from dra_driver.explain.cel_env import AttributeValue
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import Quantity, parse_quantity
from dra_driver.vocabulary.semver import parse_semver

Obj = Mapping[str, Any]


@dataclass(frozen=True, slots=True)
class DeviceKey:
    driver: str
    pool: str
    device: str

    def __str__(self) -> str:
        return f"{self.driver}/{self.pool}/{self.device}"


@dataclass(frozen=True, slots=True)
class CapacitySpec:
    value: Quantity
    default: Quantity | None = None
    valid_values: tuple[Quantity, ...] = ()
    range_min: Quantity | None = None
    range_max: Quantity | None = None
    range_step: Quantity | None = None

    @property
    def has_policy(self) -> bool:
        return self.default is not None or bool(self.valid_values) or self.range_min is not None


@dataclass(frozen=True, slots=True)
class Taint:
    key: str
    value: str
    effect: str


@dataclass(frozen=True, slots=True)
class CatalogDevice:
    key: DeviceKey
    attributes: Mapping[str, AttributeValue]  # qualified names
    capacity: Mapping[str, CapacitySpec]  # qualified names
    consumes: tuple[tuple[str, tuple[tuple[str, Quantity], ...]], ...] = ()  # (counter set, counters)
    allow_multiple_allocations: bool = False
    taints: tuple[Taint, ...] = ()
    # qualified → as the slice spells it: kube-scheduler matches capacity requests by exact string
    capacity_spelling: Mapping[str, str] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return self.key.device


@dataclass(frozen=True, slots=True)
class Allocation:
    """One result of an allocated claim: what a device already gives away."""

    device: DeviceKey
    claim: str  # namespace/name
    consumed: Mapping[str, Quantity] = field(default_factory=dict)  # qualified capacity names


@dataclass(frozen=True, slots=True)
class Catalog:
    devices: tuple[CatalogDevice, ...]
    counter_sets: Mapping[tuple[str, str, str], Mapping[str, Quantity]]  # (driver, pool, set) → counters

    def device(self, key: DeviceKey) -> CatalogDevice | None:
        return next((d for d in self.devices if d.key == key), None)


def qualify(name: str, driver: str) -> str:
    return name if "/" in name else f"{driver}/{name}"


def _attribute(name: str, raw: Obj) -> AttributeValue:
    for kind in ("int", "bool", "string"):
        if kind in raw:
            value: AttributeValue = raw[kind]
            return value
    if "version" in raw:
        return parse_semver(str(raw["version"]))
    for kind in ("ints", "bools", "strings"):  # list-valued (DRAListTypeAttributes)
        if isinstance(raw.get(kind), list):
            return tuple(raw[kind])
    raise ConfigError(f"attribute {name!r} has none of int, bool, string, version, ints, bools, strings")


def _capacity(raw: Obj) -> CapacitySpec:
    policy = raw.get("requestPolicy") or {}
    rng = policy.get("validRange") or {}

    def q(v: Any) -> Quantity | None:
        return None if v is None else parse_quantity(v if isinstance(v, int) else str(v))

    value = q(raw.get("value"))
    if value is None:
        raise ConfigError("capacity without value")
    return CapacitySpec(
        value=value,
        default=q(policy.get("default")),
        valid_values=tuple(parse_quantity(str(v)) for v in policy.get("validValues") or ()),
        range_min=q(rng.get("min")),
        range_max=q(rng.get("max")),
        range_step=q(rng.get("step")),
    )


def _device(driver: str, pool: str, raw: Obj) -> CatalogDevice:
    name = str(raw["name"])
    attributes = {qualify(k, driver): _attribute(k, v) for k, v in (raw.get("attributes") or {}).items()}
    capacity = {qualify(k, driver): _capacity(v) for k, v in (raw.get("capacity") or {}).items()}
    consumes = tuple(
        (
            str(c["counterSet"]),
            tuple((k, parse_quantity(str(v["value"]))) for k, v in (c.get("counters") or {}).items()),
        )
        for c in raw.get("consumesCounters") or ()
    )
    taints = tuple(
        Taint(str(t["key"]), str(t.get("value", "")), str(t["effect"])) for t in raw.get("taints") or ()
    )
    return CatalogDevice(
        key=DeviceKey(driver, pool, name),
        attributes=attributes,
        capacity=capacity,
        consumes=consumes,
        allow_multiple_allocations=bool(raw.get("allowMultipleAllocations", False)),
        taints=taints,
        capacity_spelling={qualify(k, driver): k for k in raw.get("capacity") or {}},
    )


def slice_applies_to(raw_slice: Obj, node: str | None) -> bool:
    spec = raw_slice.get("spec") or {}
    if node is None or spec.get("allNodes"):
        return True
    return spec.get("nodeName") == node


def build_catalog(slices: Iterable[Obj], *, node: str | None = None) -> Catalog:
    """Devices in the order the scheduler visits them: by driver, pool, slice name, then slice order."""
    chosen = [s for s in slices if slice_applies_to(s, node)]
    chosen.sort(
        key=lambda s: (s["spec"]["driver"], s["spec"]["pool"]["name"], s.get("metadata", {}).get("name", ""))
    )
    devices: list[CatalogDevice] = []
    counters: dict[tuple[str, str, str], Mapping[str, Quantity]] = {}
    for s in chosen:
        spec = s["spec"]
        driver, pool = str(spec["driver"]), str(spec["pool"]["name"])
        try:
            devices.extend(_device(driver, pool, d) for d in spec.get("devices") or ())
            for cs in spec.get("sharedCounters") or ():
                counters[(driver, pool, str(cs["name"]))] = {
                    k: parse_quantity(str(v["value"])) for k, v in (cs.get("counters") or {}).items()
                }
        except (KeyError, TypeError, ConfigError) as e:
            name = s.get("metadata", {}).get("name", "?")
            raise ConfigError(f"ResourceSlice {name}: cannot read it ({e})") from e
    return Catalog(tuple(devices), counters)


def claim_ref(raw_claim: Obj) -> str:
    meta = raw_claim.get("metadata") or {}
    return f"{meta.get('namespace', 'default')}/{meta.get('name', '')}"


def allocations_of(claims: Iterable[Obj], *, skip: str | None = None) -> tuple[Allocation, ...]:
    """Results of allocated claims (all drivers); `skip` leaves out the claim being explained."""
    out: list[Allocation] = []
    for c in claims:
        ref = claim_ref(c)
        if ref == skip:
            continue
        allocation = (c.get("status") or {}).get("allocation") or {}
        for r in (allocation.get("devices") or {}).get("results") or ():
            driver = str(r["driver"])
            consumed = {
                qualify(k, driver): parse_quantity(str(v))
                for k, v in (r.get("consumedCapacity") or {}).items()
            }
            out.append(Allocation(DeviceKey(driver, str(r["pool"]), str(r["device"])), ref, consumed))
    return tuple(out)
