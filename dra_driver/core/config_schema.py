"""The opaque configuration API as data: one declarative table of fields per kind (pure).

Every `resource.tessera.dev/v1` kind a family accepts is a `ConfigKind`: its fields with type, range or
choices, default, meaning and who may set each value. From these tables come the node's strict decoder
(`dra_driver.core.config`), the admission policy's CEL (`dra_driver.core.config_policy`, checked against the
files in deviceclasses/ and the chart), and the table in the docs; tests fail when any of them drifts.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from enum import StrEnum
from typing import Any

from dra_driver.vocabulary.names import Family


class SmLimitPolicy(StrEnum):
    """HAMi's GPU_CORE_UTILIZATION_POLICY: honour the SM limit, enforce it even when alone, or ignore it."""

    DEFAULT = "default"
    FORCE = "force"
    DISABLE = "disable"


@dataclass(frozen=True, slots=True)
class ClassOnly:
    """A value only a DeviceClass's config may set (an administrator's choice), and why."""

    value: int | str
    why: str  # completes "<field>: <value> ..." in messages
    instead: str  # what a claim's author can do instead


@dataclass(frozen=True, slots=True)
class ConfigField:
    """One field of a kind; `attr` names the dataclass field the decoder fills."""

    name: str  # JSON name (camelCase)
    attr: str
    meaning: str
    default: int | str
    minimum: int | None = None  # integer fields: inclusive range
    maximum: int | None = None
    choices: type[StrEnum] | None = None  # string fields: one of the enum's values
    class_only: tuple[ClassOnly, ...] = ()

    @property
    def is_integer(self) -> bool:
        return self.choices is None

    def values_text(self) -> str:
        """`0-4 (0 errors only … 4 trace)` or `default, force, disable`, for messages and docs."""
        if self.choices is not None:
            return ", ".join(c.value for c in self.choices)
        return f"{self.minimum}-{self.maximum}"

    def convert(self, value: int | str) -> Any:
        return self.choices(str(value)) if self.choices is not None else value


@dataclass(frozen=True, slots=True)
class ConfigKind:
    """A kind of the API: which family's devices it configures and what it may say about them."""

    kind: str
    family: Family
    type: type[Any]  # a frozen dataclass whose fields are exactly the table's attrs, with the defaults
    fields: tuple[ConfigField, ...] = ()
    meaning: str = ""

    def __post_init__(self) -> None:
        declared = {f.name: f.default for f in fields(self.type)}
        table = {f.attr: f.convert(f.default) for f in self.fields}
        if declared != table:
            raise TypeError(f"{self.kind}: the dataclass {self.type.__name__} and the field table disagree")

    def field(self, name: str) -> ConfigField | None:
        return next((f for f in self.fields if f.name == name), None)

    def default(self) -> Any:
        return self.type()

    def build(self, values: Mapping[str, object]) -> Any:
        """The config with `values` (dataclass attr → value, already checked) over the defaults."""
        return self.type(**values)
