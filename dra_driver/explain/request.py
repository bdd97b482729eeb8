"""A ResourceClaim's requests and constraints, and DeviceClasses, as values the explainer walks."""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import Quantity, parse_quantity

Obj = Mapping[str, Any]
EXACT_COUNT = "ExactCount"
ALL = "All"


@dataclass(frozen=True, slots=True)
class Toleration:
    key: str
    operator: str  # Equal | Exists
    value: str
    effect: str  # "" tolerates every effect


@dataclass(frozen=True, slots=True)
class Request:
    """One `exactly` request or one `firstAvailable` subrequest (named `<request>/<sub>`)."""

    name: str
    device_class: str
    selectors: tuple[str, ...] = ()
    mode: str = EXACT_COUNT
    count: int = 1
    capacity: Mapping[str, Quantity] | None = None  # keys as the claim spells them
    tolerations: tuple[Toleration, ...] = ()


@dataclass(frozen=True, slots=True)
class ClaimRequest:
    name: str
    alternatives: tuple[Request, ...]  # one for `exactly`, in order for `firstAvailable`


@dataclass(frozen=True, slots=True)
class Constraint:
    requests: tuple[str, ...]  # empty: every request
    match_attribute: str | None = None
    distinct_attribute: str | None = None


@dataclass(frozen=True, slots=True)
class ClaimSpec:
    ref: str  # namespace/name
    requests: tuple[ClaimRequest, ...]
    constraints: tuple[Constraint, ...] = ()


@dataclass(frozen=True, slots=True)
class DeviceClassSpec:
    name: str
    selectors: tuple[str, ...]


def _selectors(raw: Iterable[Obj] | None) -> tuple[str, ...]:
    return tuple(str(s["cel"]["expression"]) for s in raw or () if "cel" in s)


def _request(name: str, raw: Obj, where: str) -> Request:
    if not raw.get("deviceClassName"):
        raise ConfigError(f"{where}.deviceClassName: missing; name a DeviceClass such as vgpu.tessera.dev")
    mode = str(raw.get("allocationMode") or EXACT_COUNT)
    if mode not in (EXACT_COUNT, ALL):
        raise ConfigError(f"{where}.allocationMode: {mode!r} is not ExactCount or All")
    count = int(raw.get("count", 1)) if mode == EXACT_COUNT else 0
    if mode == EXACT_COUNT and count < 1:
        raise ConfigError(f"{where}.count: must be at least 1")
    requests = (raw.get("capacity") or {}).get("requests")
    try:
        capacity = {str(k): parse_quantity(str(v)) for k, v in requests.items()} if requests else None
    except ConfigError as e:
        raise ConfigError(f"{where}.capacity.requests: {e}") from e
    tolerations = tuple(
        Toleration(
            str(t.get("key", "")),
            str(t.get("operator", "Equal")),
            str(t.get("value", "")),
            str(t.get("effect", "")),
        )
        for t in raw.get("tolerations") or ()
    )
    return Request(
        name,
        str(raw["deviceClassName"]),
        _selectors(raw.get("selectors")),
        mode,
        count,
        capacity,
        tolerations,
    )


def parse_claim(raw: Obj) -> ClaimSpec:
    """Accept a ResourceClaim, or a ResourceClaimTemplate (its spec.spec is the claim's spec)."""
    meta = raw.get("metadata") or {}
    spec = raw.get("spec") or {}
    if raw.get("kind") == "ResourceClaimTemplate":
        spec = spec.get("spec") or {}
    devices = spec.get("devices") or {}
    requests: list[ClaimRequest] = []
    for i, r in enumerate(devices.get("requests") or ()):
        where = f"spec.devices.requests[{i}]"
        name = str(r.get("name") or "")
        if not name:
            raise ConfigError(f"{where}.name: missing")
        if "exactly" in r:
            requests.append(ClaimRequest(name, (_request(name, r["exactly"], f"{where}.exactly"),)))
        elif "firstAvailable" in r:
            subs = tuple(
                _request(f"{name}/{s['name']}", s, f"{where}.firstAvailable[{j}]")
                for j, s in enumerate(r["firstAvailable"])
            )
            requests.append(ClaimRequest(name, subs))
        else:
            raise ConfigError(f"{where}: needs `exactly` or `firstAvailable`")
    constraints = tuple(
        Constraint(
            tuple(str(n) for n in c.get("requests") or ()),
            c.get("matchAttribute"),
            c.get("distinctAttribute"),
        )
        for c in devices.get("constraints") or ()
    )
    return ClaimSpec(
        f"{meta.get('namespace', 'default')}/{meta.get('name', '')}", tuple(requests), constraints
    )


def parse_device_class(raw: Obj) -> DeviceClassSpec:
    return DeviceClassSpec(str(raw["metadata"]["name"]), _selectors((raw.get("spec") or {}).get("selectors")))
