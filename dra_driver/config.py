"""The opaque configuration API `resource.tessera.dev/v1`: strict decoding and merging.

Users put these objects in `spec.devices.config[].opaque.parameters` of a claim or a DeviceClass. Decoding
is strict (unknown fields, wrong types and bad values are errors that name the field and the fix), and
merging is field by field: class configs first, then claim configs, later wins. Limits never come from
here: memory and SM share are taken from the allocation's consumed capacity only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from dra_driver.errors import ConfigError
from dra_driver.excerpt import clip, excerpt
from dra_driver.names import CONFIG_API_VERSION, Family


class SmLimitPolicy(StrEnum):
    """HAMi's GPU_CORE_UTILIZATION_POLICY: honour the SM limit, enforce it even when alone, or ignore it."""

    DEFAULT = "default"
    FORCE = "force"
    DISABLE = "disable"


class ConfigSource(StrEnum):
    FROM_CLASS = "FromClass"
    FROM_CLAIM = "FromClaim"


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """A whole GPU has nothing to tune yet; the kind exists so configs can name it explicitly."""


@dataclass(frozen=True, slots=True)
class MigConfig:
    """A MIG instance has nothing to tune yet; the kind exists so configs can name it explicitly."""


@dataclass(frozen=True, slots=True)
class VgpuConfig:
    sm_limit_policy: SmLimitPolicy = SmLimitPolicy.DEFAULT
    # HAMi CUDA_TASK_PRIORITY: 0 = high priority (not throttled by low-priority peers), 1 = normal.
    priority: int = 1
    log_level: int = 1  # 0 errors only … 4 trace


DeviceConfig = GpuConfig | VgpuConfig | MigConfig

KIND_FAMILY: Mapping[str, Family] = {
    "GpuConfig": Family.GPU,
    "VgpuConfig": Family.VGPU,
    "MigConfig": Family.MIG,
}
_KIND_CLASS: Mapping[str, type[DeviceConfig]] = {
    "GpuConfig": GpuConfig,
    "VgpuConfig": VgpuConfig,
    "MigConfig": MigConfig,
}
_FAMILY_CLASS: Mapping[Family, type[DeviceConfig]] = {
    Family.GPU: GpuConfig,
    Family.VGPU: VgpuConfig,
    Family.MIG: MigConfig,
}

# JSON field name → (dataclass field, decoder)
_VGPU_FIELDS = ("smLimitPolicy", "priority", "logLevel")


@dataclass(frozen=True, slots=True)
class OpaqueConfig:
    """One entry of `status.allocation.devices.config[]` that names our driver, not yet decoded."""

    source: ConfigSource
    requests: tuple[str, ...]  # empty: every request of the claim
    parameters: object
    index: int  # position in the claim's list, for error messages

    def applies_to(self, request: str) -> bool:
        # A result's request may be "<request>/<subrequest>" (firstAvailable); a config may name either.
        return not self.requests or request in self.requests or request.split("/", 1)[0] in self.requests


@dataclass(frozen=True, slots=True)
class DecodedConfig:
    """A decoded config: its kind and the fields it set explicitly (so merging can be field by field)."""

    kind: str
    family: Family
    values: Mapping[str, object]


def _where(entry: OpaqueConfig) -> str:
    return f"config[{entry.index}] ({entry.source.value}) opaque.parameters"


def _int_field(value: object, *, path: str, low: int, high: int, meaning: str) -> int:
    # bool is an int in Python but never in JSON.
    if isinstance(value, bool) or not isinstance(value, int):
        raise ConfigError(f"{path}: must be an integer {low}-{high} ({meaning}), got {excerpt(value)}")
    if not low <= value <= high:
        raise ConfigError(f"{path}: {value} is out of range; use an integer {low}-{high} ({meaning})")
    return value


def _decode_vgpu(params: Mapping[str, Any], where: str) -> dict[str, object]:
    values: dict[str, object] = {}
    if "smLimitPolicy" in params:
        raw = params["smLimitPolicy"]
        allowed = ", ".join(p.value for p in SmLimitPolicy)
        if not isinstance(raw, str):
            raise ConfigError(
                f"{where}.smLimitPolicy: must be a string, one of {allowed}; got {excerpt(raw)}"
            )
        try:
            values["sm_limit_policy"] = SmLimitPolicy(raw)
        except ValueError as e:
            raise ConfigError(f"{where}.smLimitPolicy: {excerpt(raw)} is not one of {allowed}") from e
    if "priority" in params:
        values["priority"] = _int_field(
            params["priority"], path=f"{where}.priority", low=0, high=1, meaning="0 high, 1 normal"
        )
    if "logLevel" in params:
        values["log_level"] = _int_field(
            params["logLevel"], path=f"{where}.logLevel", low=0, high=4, meaning="0 errors only … 4 trace"
        )
    return values


def _parameters_object(entry: OpaqueConfig) -> Mapping[str, Any]:
    raw = entry.parameters
    if isinstance(raw, bytes | str):
        try:
            raw = json.loads(raw)
        except (ValueError, RecursionError) as e:
            raise ConfigError(f"{_where(entry)}: not valid JSON ({clip(str(e), 200)}); give an object") from e
    if not isinstance(raw, Mapping):
        raise ConfigError(
            f"{_where(entry)}: must be an object with apiVersion {CONFIG_API_VERSION} and a kind, "
            f"got {type(raw).__name__}"
        )
    return raw


def decode(entry: OpaqueConfig) -> DecodedConfig:
    """Strictly decode one opaque config; every error names the field path and the fix."""
    params = _parameters_object(entry)
    where = _where(entry)
    api_version = params.get("apiVersion")
    if api_version != CONFIG_API_VERSION:
        raise ConfigError(f"{where}.apiVersion: must be {CONFIG_API_VERSION!r}, got {excerpt(api_version)}")
    kind = params.get("kind")
    if not isinstance(kind, str) or kind not in _KIND_CLASS:
        raise ConfigError(f"{where}.kind: must be one of {', '.join(_KIND_CLASS)}, got {excerpt(kind)}")
    known = {"apiVersion", "kind", *(_VGPU_FIELDS if kind == "VgpuConfig" else ())}
    unknown = sorted(k for k in params if k not in known)
    if unknown:
        valid = ", ".join(sorted(known - {"apiVersion", "kind"})) or "none"
        raise ConfigError(
            f"{where}.{excerpt(unknown[0], bare=True)}: unknown field in {kind}; valid fields: {valid}"
        )
    values = _decode_vgpu(params, where) if kind == "VgpuConfig" else {}
    if entry.source is ConfigSource.FROM_CLAIM:
        _claim_may_set(values, where)
    return DecodedConfig(kind=kind, family=KIND_FAMILY[kind], values=values)


def _claim_may_set(values: Mapping[str, object], where: str) -> None:
    """A claim cannot raise its own limit or hold others back: only an administrator's DeviceClass config
    may switch the SM limit off or give a claim high priority (which makes the GPU's other claims wait)."""
    if values.get("priority") == 0:
        raise ConfigError(
            f"{where}.priority: 0 (high priority) holds the GPU's other claims back, so only a DeviceClass's "
            "config may set it; use a DeviceClass your administrator made for high-priority work"
        )
    if values.get("sm_limit_policy") is SmLimitPolicy.DISABLE:
        raise ConfigError(
            f"{where}.smLimitPolicy: disable switches the claim's SM limit off, so only a DeviceClass's "
            "config may set it; request fewer or more cores instead"
        )


def decode_all(entries: Sequence[OpaqueConfig]) -> tuple[tuple[OpaqueConfig, DecodedConfig], ...]:
    """Decode every entry up front, so a bad config fails the claim even if no device uses it."""
    return tuple((e, decode(e)) for e in entries)


def ordered(entries: Sequence[OpaqueConfig]) -> tuple[OpaqueConfig, ...]:
    """Class configs first, then claim configs, each in their given order."""
    return tuple(sorted(entries, key=lambda e: (0 if e.source is ConfigSource.FROM_CLASS else 1, e.index)))


def resolve(
    decoded: Sequence[tuple[OpaqueConfig, DecodedConfig]], *, request: str, family: Family
) -> DeviceConfig:
    """The effective config of one allocated device: matching entries merged field by field, later wins.

    Configs of another family's kind are skipped: a config without `requests` applies to every request,
    and a claim may mix families.
    """
    merged: dict[str, Any] = {}  # values were type-checked by decode()
    for entry, config in decoded:
        if config.family is family and entry.applies_to(request):
            merged.update(config.values)
    cls = _FAMILY_CLASS[family]
    valid = {f.name for f in fields(cls)}
    return cls(**{k: v for k, v in merged.items() if k in valid})
