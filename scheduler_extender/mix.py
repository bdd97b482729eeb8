"""The mix of typical requests the fragmentation is measured against (pure: CSV text in, a mix out).

One row per request shape, in the columns of a GPU-sharing trace's pod list (Alibaba's openb trace,
docs/performance.md): `cpu_milli, memory_mib, num_gpu, gpu_milli`, and `count`, how often the shape occurs
(default 1). Other columns are read past, so a trace's pod list is a mix as it stands. `num_gpu` 1 with
`gpu_milli` 1 to 999 is a share of one GPU, `num_gpu` N with `gpu_milli` 1000 is N whole GPUs. A row with
`num_gpu` 0 (CPU and memory only) is checked and left out: such a request finds a node's free GPUs unusable
wherever a pod goes, so it changes no ranking. Rows of one shape add up; the MAX_KINDS most frequent shapes
are kept (the score's cost grows with them).

The extender ships the mix of the openb trace's default pod list (`mixes/openb.csv`, its 8,152 pods:
`mix_csv(parse_mix(that file))`); `--mix FILE` gives another, e.g. from a ConfigMap (docs/scheduling.md).
"""

from __future__ import annotations

import csv
import io
import math
from collections.abc import Iterator, Mapping

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import excerpt
from scheduler_extender.fragmentation import MILLI, Demand, Share, Typical, Whole

MIB = 1 << 20
MAX_KINDS = 256
MAX_TEXT = 64 * 1024 * 1024  # a pod list of about a million rows
COLUMNS = ("cpu_milli", "memory_mib", "num_gpu", "gpu_milli")
HEADER = (*COLUMNS, "count")


def _whole_number(row: Mapping[str, str | None], column: str, where: str, *, high: int) -> int:
    raw = (row.get(column) or "").strip()
    try:
        value = int(raw)
    except ValueError:
        raise ConfigError(f"{where}: {column} {excerpt(raw)} is not a whole number") from None
    if not 0 <= value <= high:
        raise ConfigError(f"{where}: {column} {value} is out of range; give 0..{high}")
    return value


def _count(row: Mapping[str, str | None], where: str) -> float:
    raw = (row.get("count") or "").strip()
    if not raw:
        return 1.0
    try:
        value = float(raw)
    except ValueError:
        raise ConfigError(f"{where}: count {excerpt(raw)} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ConfigError(f"{where}: count {raw} is out of range; give a number of at least 0")
    return value


def _demand(num_gpu: int, gpu_milli: int, where: str) -> Demand | None:
    if num_gpu == 0:
        if gpu_milli:
            raise ConfigError(f"{where}: gpu_milli {gpu_milli} without a GPU; give num_gpu 1 or gpu_milli 0")
        return None
    if num_gpu == 1 and 0 < gpu_milli < MILLI:
        return Share(gpu_milli)
    if gpu_milli == MILLI:
        return Whole(num_gpu)
    raise ConfigError(
        f"{where}: num_gpu {num_gpu} with gpu_milli {gpu_milli}; give num_gpu 1 with gpu_milli 1..999 "
        "(a share of one GPU) or gpu_milli 1000 (whole GPUs)"
    )


def _rows(text: str, what: str) -> Iterator[tuple[str, Mapping[str, str | None]]]:
    reader = csv.DictReader(io.StringIO(text, newline=""))
    try:
        missing = [c for c in COLUMNS if c not in (reader.fieldnames or [])]
        if missing:
            raise ConfigError(
                f"{what}: no column {', '.join(missing)} (a mix needs {', '.join(COLUMNS)}, and count)"
            )
        for row in reader:
            yield f"{what} line {reader.line_num}", row
    except csv.Error as e:
        raise ConfigError(f"{what} line {reader.line_num}: not CSV ({e})") from e


def shape_key(typical: Typical) -> tuple[int, int, int, int]:
    """An order of shapes that does not depend on how they were listed: shares, then whole GPUs."""
    gpu = typical.gpu
    kind, size = (0, gpu.milli) if isinstance(gpu, Share) else (1, gpu.count)
    return kind, size, typical.cpu_milli, typical.memory


def parse_mix(text: str, *, what: str = "mix") -> dict[Typical, float]:
    """The mix a CSV gives (typical request → weight), most frequent first; ConfigError naming the line and
    the column of a bad value, or when no row asks for a GPU."""
    if len(text) > MAX_TEXT:
        raise ConfigError(
            f"{what}: {len(text)} characters, more than {MAX_TEXT}; give the shapes with counts"
        )
    weights: dict[Typical, float] = {}
    for where, row in _rows(text, what):
        demand = _demand(
            _whole_number(row, "num_gpu", where, high=64),
            _whole_number(row, "gpu_milli", where, high=MILLI),
            where,
        )
        cpu = _whole_number(row, "cpu_milli", where, high=10**7)
        memory = _whole_number(row, "memory_mib", where, high=10**9)
        count = _count(row, where)
        if demand is None or count == 0:
            continue
        typical = Typical(demand, cpu_milli=cpu, memory=memory * MIB)
        weights[typical] = weights.get(typical, 0.0) + count
    if not weights:
        raise ConfigError(f"{what}: no row asks for a GPU; a mix needs at least one (num_gpu 1 or more)")
    ranked = sorted(weights.items(), key=lambda kv: (-kv[1], shape_key(kv[0])))
    return dict(ranked[:MAX_KINDS])


def mix_csv(mix: Mapping[Typical, float]) -> str:
    """`mix` as the CSV `parse_mix` reads (memory in whole MiB)."""
    lines = [",".join(HEADER)]
    for typical, weight in mix.items():
        gpu = typical.gpu
        num_gpu, gpu_milli = (1, gpu.milli) if isinstance(gpu, Share) else (gpu.count, MILLI)
        lines.append(f"{typical.cpu_milli},{typical.memory // MIB},{num_gpu},{gpu_milli},{weight:g}")
    return "\n".join(lines) + "\n"
