"""The rows of a GPU-sharing cluster trace in the columns of Alibaba's openb trace (pure: text in, values
out).

Nodes: `sn, cpu_milli, memory_mib, gpu, model`. Pods: `name, cpu_milli, memory_mib, num_gpu, gpu_milli,
gpu_spec` (other columns, e.g. `qos` or the times, are read past). A pod asks for nothing but CPU and memory
(`num_gpu` 0), a share of one GPU in thousandths (`num_gpu` 1, `gpu_milli` < 1000) or `num_gpu` whole GPUs
(`gpu_milli` 1000); `gpu_spec` lists the GPU models it may run on (`V100M16|V100M32`, empty: any)."""

from __future__ import annotations

import csv
import io
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from enum import StrEnum

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
POD_COLUMNS = ("name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec")
WHOLE_MILLI = 1000


class TraceError(ValueError):
    """A trace file that cannot be read: names the file's line and column and what a good value is."""


class Ask(StrEnum):
    CPU = "cpu"  # CPU and memory only
    SHARE = "share"  # a share of one GPU
    WHOLE = "whole"  # whole GPUs of one node


@dataclass(frozen=True, slots=True)
class TraceNode:
    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    model: str

    @property
    def gpu_milli(self) -> int:
        return self.gpus * WHOLE_MILLI


@dataclass(frozen=True, slots=True)
class TracePod:
    name: str
    cpu_milli: int
    memory_mib: int
    num_gpu: int
    gpu_milli: int
    gpu_spec: tuple[str, ...] = ()  # the models it may use; empty: any

    @property
    def ask(self) -> Ask:
        if self.num_gpu == 0:
            return Ask.CPU
        return Ask.SHARE if self.gpu_milli < WHOLE_MILLI else Ask.WHOLE

    @property
    def request_milli(self) -> int:
        """The GPU it asks for in thousandths of a GPU (the trace's unit of arrival and allocation)."""
        return self.gpu_milli if self.ask is Ask.SHARE else self.num_gpu * WHOLE_MILLI


def _rows(text: str, columns: tuple[str, ...], what: str) -> Iterator[tuple[int, Mapping[str, str]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in columns if c not in (reader.fieldnames or [])]
        if missing:
            raise TraceError(f"{what}: no column {', '.join(missing)} (needs {', '.join(columns)})")
        for row in reader:
            yield reader.line_num, row
    except csv.Error as e:
        raise TraceError(f"{what} line {reader.line_num}: not CSV ({e})") from e


def _int(row: Mapping[str, str], column: str, where: str, *, low: int, high: int) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise TraceError(f"{where}: {column} {raw!r} is not a whole number") from None
    if not low <= value <= high:
        raise TraceError(f"{where}: {column} {value} is out of range; give {low}..{high}")
    return value


def _name(row: Mapping[str, str], column: str, where: str) -> str:
    name = (row.get(column) or "").strip()
    if not name:
        raise TraceError(f"{where}: {column} is empty; every row needs a name")
    return name


def parse_nodes(text: str, *, what: str = "node list") -> list[TraceNode]:
    nodes: list[TraceNode] = []
    seen: set[str] = set()
    for line, row in _rows(text, NODE_COLUMNS, what):
        where = f"{what} line {line}"
        name = _name(row, "sn", where)
        if name in seen:
            raise TraceError(f"{where}: node {name!r} is listed twice")
        seen.add(name)
        nodes.append(
            TraceNode(
                name=name,
                cpu_milli=_int(row, "cpu_milli", where, low=1, high=10**7),
                memory_mib=_int(row, "memory_mib", where, low=1, high=10**9),
                gpus=_int(row, "gpu", where, low=0, high=64),
                model=(row.get("model") or "").strip(),
            )
        )
        if nodes[-1].gpus and not nodes[-1].model:
            raise TraceError(f"{where}: model is empty for a node with GPUs; name its GPU model (e.g. T4)")
    return nodes


def parse_pods(text: str, *, what: str = "pod list") -> list[TracePod]:
    pods: list[TracePod] = []
    seen: set[str] = set()
    for line, row in _rows(text, POD_COLUMNS, what):
        where = f"{what} line {line}"
        name = _name(row, "name", where)
        if name in seen:
            raise TraceError(f"{where}: pod {name!r} is listed twice")
        seen.add(name)
        num_gpu = _int(row, "num_gpu", where, low=0, high=64)
        gpu_milli = _int(row, "gpu_milli", where, low=0, high=WHOLE_MILLI)
        if num_gpu == 0 and gpu_milli:
            raise TraceError(f"{where}: gpu_milli {gpu_milli} without a GPU; give num_gpu 1 or gpu_milli 0")
        if num_gpu and not gpu_milli:
            raise TraceError(f"{where}: num_gpu {num_gpu} with gpu_milli 0; give the share (1..1000)")
        if num_gpu > 1 and gpu_milli < WHOLE_MILLI:
            raise TraceError(
                f"{where}: {num_gpu} GPUs at gpu_milli {gpu_milli}; only one GPU can be shared "
                "(give num_gpu 1, or gpu_milli 1000 for whole GPUs)"
            )
        spec = tuple(m.strip() for m in (row.get("gpu_spec") or "").split("|") if m.strip())
        pods.append(
            TracePod(
                name=name,
                cpu_milli=_int(row, "cpu_milli", where, low=0, high=10**7),
                memory_mib=_int(row, "memory_mib", where, low=0, high=10**9),
                num_gpu=num_gpu,
                gpu_milli=gpu_milli,
                gpu_spec=spec,
            )
        )
    return pods
