"""What the publisher must write to turn the pool's slices on the API server into the desired ones.

Pure: desired slices (wire dicts from `dra_driver.core.slices`) + existing slices (wire dicts as read back) →
actions. Specs are compared semantically (quantities by value: the API server canonicalises `16384Mi` to
`16Gi`), ignoring `pool.generation`, which the publisher owns: any change rewrites every slice of the pool
with generation + 1 (consumers use only the newest generation), creating and updating before deleting.
"""

from __future__ import annotations

import copy
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from enum import StrEnum
from typing import Any

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import parse_quantity

Json = dict[str, Any]
# Keys whose string values are quantities in a ResourceSlice spec.
_QUANTITY_KEYS = frozenset({"value", "default", "min", "max", "step"})


class Verb(StrEnum):
    CREATE = "create"
    UPDATE = "update"
    DELETE = "delete"


@dataclass(frozen=True, slots=True)
class Action:
    verb: Verb
    name: str
    body: Json | None = None  # create/update: the full object
    resource_version: str | None = None  # update/delete: optimistic concurrency


@dataclass(frozen=True, slots=True)
class Plan:
    generation: int  # the pool generation after the actions
    actions: tuple[Action, ...]

    @property
    def writes(self) -> int:
        return len(self.actions)


def _quantity(text: str) -> str:
    try:
        value = parse_quantity(text).value
    except ConfigError:
        return text
    return str(value)


def canonical(value: Any, key: str | None = None) -> Any:
    """A comparable form of a spec fragment: quantities by value, `None`s and empty containers dropped."""
    if isinstance(value, Mapping):
        out = {k: canonical(v, k) for k, v in value.items()}
        return {k: v for k, v in out.items() if v is not None and v not in ({}, [])}
    if isinstance(value, list):
        return [canonical(v, key) for v in value]
    if isinstance(value, str) and key in _QUANTITY_KEYS | {"validValues"}:
        return _quantity(value)
    return value


def content(spec: Mapping[str, Any]) -> Any:
    """The spec without the generation, in canonical form."""
    stripped = copy.deepcopy(dict(spec))
    pool = dict(stripped.get("pool", {}))
    pool.pop("generation", None)
    stripped["pool"] = pool
    return canonical(stripped)


def _name(obj: Mapping[str, Any]) -> str:
    return str(obj["metadata"]["name"])


def _generation(obj: Mapping[str, Any]) -> int:
    return int(obj["spec"]["pool"].get("generation", 0))


def with_generation(slice_: Json, generation: int) -> Json:
    out = copy.deepcopy(slice_)
    out["spec"]["pool"]["generation"] = generation
    return out


def plan(desired: Sequence[Json], existing: Sequence[Json]) -> Plan:
    """Actions that make `existing` equal `desired`; none when it already does (at any generation)."""
    have = {_name(e): e for e in existing}
    want = {_name(d): d for d in desired}
    current = max((_generation(e) for e in existing), default=0)
    same = (
        have.keys() == want.keys()
        and len({_generation(e) for e in existing}) <= 1
        and all(content(have[n]["spec"]) == content(want[n]["spec"]) for n in want)
    )
    if same:
        return Plan(generation=current, actions=())
    generation = current + 1
    actions: list[Action] = []
    for name, d in want.items():
        body = with_generation(d, generation)
        if name in have:
            rv = have[name].get("metadata", {}).get("resourceVersion")
            body["metadata"]["resourceVersion"] = rv
            actions.append(Action(Verb.UPDATE, name, body, rv))
        else:
            actions.append(Action(Verb.CREATE, name, body))
    for name, e in have.items():
        if name not in want:
            actions.append(Action(Verb.DELETE, name, None, e.get("metadata", {}).get("resourceVersion")))
    return Plan(generation=generation, actions=tuple(actions))


def _paths(value: Any, prefix: str = "") -> set[str]:
    if isinstance(value, Mapping):
        found = set()
        for k, v in value.items():
            found |= {f"{prefix}.{k}"} | _paths(v, f"{prefix}.{k}")
        return found
    if isinstance(value, list):
        found = set()
        for i, v in enumerate(value):
            found |= _paths(v, f"{prefix}[{i}]")
        return found
    return set()


def dropped_fields(desired: Sequence[Json], stored: Sequence[Json]) -> list[str]:
    """Fields we wrote that the API server did not keep (a disabled feature gate drops them silently),
    as `<slice>: spec.devices[3].allowMultipleAllocations`. A slice that is gone was deleted by someone
    (the kubelet wipes a node's slices at its start): that is a change to repair, not a dropped field."""
    by_name = {_name(s): s for s in stored}
    dropped: list[str] = []
    for d in desired:
        name = _name(d)
        if name not in by_name:
            continue
        missing = _paths(canonical(d["spec"]), "spec") - _paths(canonical(by_name[name]["spec"]), "spec")
        # Report the outermost missing path only (`…consumesCounters`, not every counter inside it).
        outer = sorted(p for p in missing if not any(p != q and p.startswith(q) for q in missing))
        dropped.extend(f"{name}: {p}" for p in outer)
    return dropped
