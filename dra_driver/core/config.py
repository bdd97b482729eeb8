"""The opaque configuration API `resource.tessera.dev/v1`: strict decoding and merging (pure).

Users put these objects in `spec.devices.config[].opaque.parameters` of a claim or a DeviceClass. Each kind
belongs to one family and is described by its field table (dra_driver/core/config_schema.py); decoding
follows the table strictly (unknown fields, wrong types and bad values are errors that name the field and the
fix), and merging is field by field: class configs first, then claim configs, later wins. Limits never come
from here: memory and SM share are taken from the allocation's consumed capacity only.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dra_driver.core import families
from dra_driver.core.config_schema import ConfigField, ConfigKind
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import clip, excerpt
from dra_driver.vocabulary.names import CONFIG_API_VERSION, Family


class ConfigSource(StrEnum):
    FROM_CLASS = "FromClass"
    FROM_CLAIM = "FromClaim"


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
    values: Mapping[str, object]  # dataclass attribute → value


def _where(entry: OpaqueConfig) -> str:
    return f"config[{entry.index}] ({entry.source.value}) opaque.parameters"


def _value(f: ConfigField, raw: object, path: str) -> object:
    """One field's value, checked against its table row."""
    if f.choices is not None:
        allowed = f.values_text()
        if not isinstance(raw, str):
            raise ConfigError(f"{path}: must be a string, one of {allowed}; got {excerpt(raw)}")
        try:
            return f.choices(raw)
        except ValueError as e:
            raise ConfigError(f"{path}: {excerpt(raw)} is not one of {allowed}") from e
    low, high = f.minimum, f.maximum
    # bool is an int in Python but never in JSON.
    if isinstance(raw, bool) or not isinstance(raw, int):
        raise ConfigError(f"{path}: must be an integer {low}-{high} ({f.meaning}), got {excerpt(raw)}")
    if (low is not None and raw < low) or (high is not None and raw > high):
        raise ConfigError(f"{path}: {raw} is out of range; use an integer {low}-{high} ({f.meaning})")
    return raw


def _claim_may_set(kind: ConfigKind, params: Mapping[str, Any], where: str) -> None:
    """A claim cannot raise its own limit or hold others back: some values are an administrator's to set, in
    a DeviceClass's config (the table's `class_only`)."""
    for f in kind.fields:
        for rule in f.class_only:
            if f.name in params and params[f.name] == rule.value and type(params[f.name]) is type(rule.value):
                raise ConfigError(
                    f"{where}.{f.name}: {rule.value} {rule.why}, so only a DeviceClass's config may set it; "
                    f"{rule.instead}"
                )


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
    raw_kind = params.get("kind")
    owner = families.by_config_kind(raw_kind) if isinstance(raw_kind, str) else None
    if owner is None:
        kinds = ", ".join(k.kind for k in families.config_kinds())
        raise ConfigError(f"{where}.kind: must be one of {kinds}, got {excerpt(raw_kind)}")
    kind = owner.config
    unknown = sorted(k for k in params if k not in ("apiVersion", "kind") and kind.field(str(k)) is None)
    if unknown:
        valid = ", ".join(f.name for f in kind.fields) or "none"
        raise ConfigError(
            f"{where}.{excerpt(unknown[0], bare=True)}: unknown field in {kind.kind}; valid fields: {valid}"
        )
    values: dict[str, object] = {}
    for f in kind.fields:
        if f.name in params:
            values[f.attr] = _value(f, params[f.name], f"{where}.{f.name}")
    if entry.source is ConfigSource.FROM_CLAIM:
        _claim_may_set(kind, params, where)
    return DecodedConfig(kind=kind.kind, family=kind.family, values=values)


def decode_all(entries: Sequence[OpaqueConfig]) -> tuple[tuple[OpaqueConfig, DecodedConfig], ...]:
    """Decode every entry up front, so a bad config fails the claim even if no device uses it."""
    return tuple((e, decode(e)) for e in entries)


def ordered(entries: Sequence[OpaqueConfig]) -> tuple[OpaqueConfig, ...]:
    """Class configs first, then claim configs, each in their given order."""
    return tuple(sorted(entries, key=lambda e: (0 if e.source is ConfigSource.FROM_CLASS else 1, e.index)))


def resolve(decoded: Sequence[tuple[OpaqueConfig, DecodedConfig]], *, request: str, family: Family) -> Any:
    """The effective config of one allocated device: matching entries merged field by field, later wins.

    Configs of another family's kind are skipped: a config without `requests` applies to every request,
    and a claim may mix families.
    """
    merged: dict[str, object] = {}  # values were type-checked by decode()
    for entry, config in decoded:
        if config.family == family and entry.applies_to(request):
            merged.update(config.values)
    return families.family(family).config.build(merged)
