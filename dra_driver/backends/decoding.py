"""Strict decoding helpers for Tessera's YAML/JSON files: unknown fields and wrong types are errors that name
the field (as a path like `gpus[2].instances[0].start`) and say what is expected."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import TypeVar

from dra_driver.vocabulary.errors import ConfigError

T = TypeVar("T")


def expect_mapping(value: object, where: str) -> Mapping[str, object]:
    if not isinstance(value, Mapping) or not all(isinstance(k, str) for k in value):
        raise ConfigError(f"{where}: expected a mapping with string keys, got {type(value).__name__}")
    return value


def expect_list(value: object, where: str) -> Sequence[object]:
    if not isinstance(value, list):
        raise ConfigError(f"{where}: expected a list, got {type(value).__name__}")
    return value


def check_fields(data: Mapping[str, object], where: str, *, required: set[str], optional: set[str]) -> None:
    unknown = sorted(set(data) - required - optional)
    if unknown:
        allowed = ", ".join(sorted(required | optional))
        raise ConfigError(f"{where}: unknown field {unknown[0]!r} (allowed fields: {allowed})")
    missing = sorted(required - set(data))
    if missing:
        raise ConfigError(f"{where}: missing required field {missing[0]!r}")


def field_path(where: str, name: str) -> str:
    return f"{where}.{name}" if where else name


def get_typed(data: Mapping[str, object], name: str, kind: type[T], where: str, default: T) -> T:
    """The field's value checked against `kind` (bool is not accepted where int is asked for)."""
    if name not in data:
        return default
    value = data[name]
    wrong_bool = kind is int and isinstance(value, bool)
    if wrong_bool or not isinstance(value, kind):
        raise ConfigError(
            f"{field_path(where, name)}: expected {kind.__name__}, got {type(value).__name__} {value!r}"
        )
    return value


def check_header(data: Mapping[str, object], where: str, *, api_version: str, kind: str) -> None:
    if data.get("apiVersion") != api_version:
        raise ConfigError(
            f"{field_path(where, 'apiVersion')}: expected {api_version!r}, got {data.get('apiVersion')!r}"
        )
    if data.get("kind") != kind:
        raise ConfigError(f"{field_path(where, 'kind')}: expected {kind!r}, got {data.get('kind')!r}")
