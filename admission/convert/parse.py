"""Reading a pod's HAMi and Volcano GPU requests: containers' extended resources and pod annotations (pure).

Everything here is checked field by field; a value that cannot mean what HAMi would do with it is a
ConversionError naming the field (as `kubectl explain` spells it) and the fix.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass

from admission.convert import names
from admission.convert.names import Dialect, Quantity
from dra_driver.vocabulary.errors import ConfigError, ConversionError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.inventory import MAX_GPUS
from dra_driver.vocabulary.quantity import parse_quantity

MAX_CORES = 100
# Extended resources are integers; bounded spellings only, so that `1e999999` is refused, not computed.
# ASCII digits only (`\d` takes full-width and other Unicode digits too), matched whole (`$` would take
# a trailing newline).
_INTEGER_RE = re.compile(r"\+?[0-9]{1,12}(?:[kMGTPE]|[KMGTPE]i|[eE]\+?[0-9]{1,2})?")
# Product-name fragments and GPU UUIDs become CEL string literals: nothing that could end one.
_TYPE_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9 ._()-]{0,63}$")
_UUID_RE = re.compile(r"^[A-Za-z0-9][A-Za-z0-9-]{0,79}$")


@dataclass(frozen=True, slots=True)
class GpuAsk:
    """One container's GPU request as HAMi means it: `count` GPUs, each with the same share."""

    path: str  # `spec.containers[0]`, `spec.initContainers[1]`
    container: str
    dialect: Dialect
    count: int
    memory_mib: int | None = None
    memory_percent: int | None = None
    cores: int | None = None
    priority: int | None = None
    written: tuple[tuple[str, str], ...] = ()  # resource name → its value (a whole number)

    def field(self, what: Quantity) -> str:
        return f"{self.path}.resources.limits[{self.dialect.resource(what)}]"


@dataclass(frozen=True, slots=True)
class Selection:
    """The pod annotations that choose GPUs and the sharing mode; they apply to every container."""

    use_types: tuple[str, ...] = ()
    nouse_types: tuple[str, ...] = ()
    use_uuids: tuple[str, ...] = ()
    nouse_uuids: tuple[str, ...] = ()
    modes: tuple[tuple[str, str], ...] = ()  # dialect name → `mig` / `mps` / `hami-core`
    gpu_policy: str | None = None
    node_policy: str | None = None
    written: tuple[tuple[str, str], ...] = ()  # annotation → value, those the conversion read

    def mode(self, dialect: Dialect) -> str:
        return dict(self.modes).get(dialect.name, "hami-core")


def _annotation(key: str) -> str:
    return f"metadata.annotations[{key}]"


def parse_integer(raw: object, field: str, *, meaning: str) -> int:
    """An extended resource's value as a whole number ≥ 0 (`3000`, `"3000"`, `3k`): the one parser of the
    numbers a pod gives the conversion."""
    text = str(raw) if isinstance(raw, int) and not isinstance(raw, bool) and 0 <= raw < 10**12 else raw
    if not isinstance(text, str) or not _INTEGER_RE.fullmatch(text):
        raise ConversionError(
            f"{field}: {excerpt(raw)} is not a whole number (1-12 ASCII digits, a suffix such as k or Mi "
            f"allowed); write {meaning} as one, e.g. 30"
        )
    try:
        value = parse_quantity(text).value
    except ConfigError as e:  # the regular expression admits only what parses; kept for safety
        raise ConversionError(f"{field}: {e}") from e
    if value.denominator != 1:
        raise ConversionError(f"{field}: {excerpt(raw)} is not a whole number; write {meaning} as one")
    return int(value)


def _list(
    annotations: Mapping[str, object], key: str, pattern: re.Pattern[str], what: str
) -> tuple[str, ...]:
    raw = annotations.get(key)
    if raw is None:
        return ()
    if not isinstance(raw, str):
        raise ConversionError(f"{_annotation(key)}: must be a string of comma-separated {what}")
    items = tuple(item.strip() for item in raw.split(",") if item.strip())
    if not items:
        raise ConversionError(f"{_annotation(key)}: names no {what}; give one or more, comma-separated")
    for item in items:
        if not pattern.fullmatch(item):
            raise ConversionError(
                f"{_annotation(key)}: {excerpt(item)} is not a {what[:-1]} "
                "(letters, digits, '-', '.', spaces)"
            )
    return items


def parse_selection(annotations: Mapping[str, object]) -> Selection:
    """The pod-level annotations of both dialects."""
    modes = []
    for d in names.DIALECTS:
        raw = annotations.get(d.mode_annotation)
        if raw is None:
            continue
        if raw not in d.modes:
            raise ConversionError(
                f"{_annotation(d.mode_annotation)}: {excerpt(raw)} is not a mode; "
                f"use one of {', '.join(d.modes)}"
            )
        modes.append((d.name, str(raw)))
    policies = []
    for key in (names.GPU_SCHEDULER_POLICY, names.NODE_SCHEDULER_POLICY):
        raw = annotations.get(key)
        if raw is not None and raw not in names.SCHEDULER_POLICIES:
            raise ConversionError(
                f"{_annotation(key)}: {excerpt(raw)} is not a policy; "
                f"use {' or '.join(names.SCHEDULER_POLICIES)}"
            )
        policies.append(None if raw is None else str(raw))
    read = (
        names.USE_GPU_TYPE,
        names.NOUSE_GPU_TYPE,
        names.USE_GPU_UUID,
        names.NOUSE_GPU_UUID,
        names.GPU_SCHEDULER_POLICY,
        names.NODE_SCHEDULER_POLICY,
        *(d.mode_annotation for d in names.DIALECTS),
    )
    return Selection(
        use_types=_list(annotations, names.USE_GPU_TYPE, _TYPE_RE, "GPU types"),
        nouse_types=_list(annotations, names.NOUSE_GPU_TYPE, _TYPE_RE, "GPU types"),
        use_uuids=_list(annotations, names.USE_GPU_UUID, _UUID_RE, "GPU UUIDs"),
        nouse_uuids=_list(annotations, names.NOUSE_GPU_UUID, _UUID_RE, "GPU UUIDs"),
        modes=tuple(modes),
        gpu_policy=policies[0],
        node_policy=policies[1],
        written=tuple((k, str(annotations[k])) for k in read if k in annotations),
    )


def _foreign(resources: Mapping[str, object], key: str) -> dict[str, object]:
    section = resources.get(key)
    if not isinstance(section, Mapping):
        return {}
    return {k: v for k, v in section.items() if names.dialect_of(k) is not None}


def _check(ask: GpuAsk) -> GpuAsk:
    """HAMi's rules for one container's values."""
    if ask.count == 0:
        raise ConversionError(
            f"{ask.field(Quantity.COUNT)}: 0 asks for no GPU; ask for 1 or more, or remove the GPU resources "
            "from this container"
        )
    if ask.count > MAX_GPUS:
        raise ConversionError(
            f"{ask.field(Quantity.COUNT)}: {ask.count} GPUs is more than one container can be given "
            f"(at most {MAX_GPUS}, each on a distinct GPU of one node); ask for {MAX_GPUS} or fewer"
        )
    if ask.memory_mib is not None and ask.memory_percent is not None:
        raise ConversionError(
            f"{ask.field(Quantity.MEMORY)}: set together with "
            f"{ask.dialect.resource(Quantity.MEMORY_PERCENT)}; give the memory "
            "either in MiB or as a percentage of the GPU, not both"
        )
    if ask.memory_mib == 0:
        raise ConversionError(
            f"{ask.field(Quantity.MEMORY)}: 0 MiB; ask for 1 MiB or more, or leave it out for the GPU's "
            "whole memory"
        )
    if ask.memory_percent is not None and not 1 <= ask.memory_percent <= 100:
        raise ConversionError(
            f"{ask.field(Quantity.MEMORY_PERCENT)}: {ask.memory_percent} is not a percentage of "
            "a GPU's memory; use 1-100"
        )
    if ask.cores is not None and ask.cores > MAX_CORES:
        raise ConversionError(
            f"{ask.field(Quantity.CORES)}: {ask.cores} is over 100; "
            "use 1-100 (% of each GPU's SMs), or 0 for no SM limit"
        )
    if ask.priority is not None and ask.priority not in (0, 1):
        raise ConversionError(f"{ask.field(Quantity.PRIORITY)}: {ask.priority}; use 0 (high) or 1 (normal)")
    return ask


def parse_container(container: Mapping[str, object], path: str) -> GpuAsk | None:
    """The container's GPU request, or None when it names no foreign resource. Limits win over requests
    (extended resources must have them equal; HAMi's users write limits)."""
    resources = container.get("resources")
    if not isinstance(resources, Mapping):
        return None
    found = {**_foreign(resources, "requests"), **_foreign(resources, "limits")}
    if not found:
        return None
    dialects = {names.dialect_of(k) for k in found}
    if len(dialects) > 1:
        raise ConversionError(
            f"{path}.resources.limits: mixes {' and '.join(sorted(k for k in found))} of HAMi and Volcano; "
            "use one project's names per container"
        )
    dialect = next(d for d in dialects if d is not None)
    values: dict[Quantity, int] = {}
    for key, raw in found.items():
        what = dialect.meaning(key)
        assert what is not None
        values[what] = parse_integer(raw, f"{path}.resources.limits[{key}]", meaning=what.value)
    name = container.get("name")
    ask = GpuAsk(
        path=path,
        container=name if isinstance(name, str) else "",
        dialect=dialect,
        count=values.get(Quantity.COUNT, 1),  # HAMi's and Volcano's defaultGPUNum
        memory_mib=values.get(Quantity.MEMORY),
        memory_percent=values.get(Quantity.MEMORY_PERCENT),
        cores=values.get(Quantity.CORES),
        priority=values.get(Quantity.PRIORITY),
        # as numbers: the API server has already turned 3000 into 3k
        written=tuple(sorted((k, str(values[m])) for k in found if (m := dialect.meaning(k)) is not None)),
    )
    return _check(ask)


_SM_POLICIES = ("default", "force")
_LOG_LEVELS = ("0", "1", "2", "3", "4")


def parse_env_config(container: Mapping[str, object], path: str) -> dict[str, object]:
    """HAMi-core's container variables that a VgpuConfig says instead (`smLimitPolicy`, `logLevel`), from
    literal `env` values; `disable` is refused: a claim cannot switch its own SM limit off."""
    env = container.get("env")
    out: dict[str, object] = {}
    for i, item in enumerate(env if isinstance(env, list) else ()):
        if not isinstance(item, Mapping) or not isinstance(item.get("value"), str):
            continue
        key, value, where = item.get("name"), str(item["value"]), f"{path}.env[{i}].value"
        if key == names.SM_POLICY_ENV:
            if value == "disable":
                raise ConversionError(
                    f"{where}: {names.SM_POLICY_ENV}=disable switches the claim's SM limit off, "
                    "which only an administrator's DeviceClass may do; "
                    "remove it, or ask for more cores instead"
                )
            if value not in _SM_POLICIES:
                raise ConversionError(f"{where}: {excerpt(value)}; use one of {', '.join(_SM_POLICIES)}")
            out["smLimitPolicy"] = value
        elif key == names.LOG_LEVEL_ENV:
            if value not in _LOG_LEVELS:
                raise ConversionError(f"{where}: {excerpt(value)}; use a log level 0-4")
            out["logLevel"] = int(value)
    return out
