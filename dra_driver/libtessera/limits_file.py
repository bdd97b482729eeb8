"""The limits file: what the interception library enforces for a claim, written by the node plugin into the
claim's directory (kubelet_plugin/library_files/limits.py) and read by the library (interceptor/src/config.c)
(pure). docs/architecture.md, "The Python ↔ C contract".

    version 1|2|3
    policy default|force|disable
    loglevel 0-4
    gpu <uuid> memory <bytes> cores <0-100> priority <0|1> [ceiling <1-100>] [resident <bytes>]
        [slot <n> view <path>]

One `gpu` line per GPU. `ceiling` (version 2 on) is the SM share the claim may burst to while its GPU's
other claims are idle. `resident` (version 3) marks a claim that opted into memory oversubscription: of its
`memory` (its whole limit) the device holds `resident` bytes for it, and the library may serve the rest from
managed memory the driver pages between host and device. A file is written in the lowest version that can say
what it holds, so the files of claims without burst or oversubscription stay version 1, which every library
reads, and those with burst alone version 2.

A GPU is named by UUID, so the limits survive device reordering in the container. `slot` and `view` put the
claim in the GPU's time-division schedule (the view is the node's read-only file for that GPU). The C library
refuses the whole file on any line it cannot read; `parse_limits` here reads exactly what `render_limits`
writes, and tests feed one into the other and into the C parser.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from dra_driver.libtessera.names import VIEW_FILE_NAME, container_gpu_dir
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import GpuUUID

LIMITS_VERSION = 3
READABLE_VERSIONS = (1, 2, 3)
POLICIES = ("default", "force", "disable")
MAX_LIMITS_BYTES = 65536  # the most the library reads (config.c LIMITS_MAX): a larger file is refused whole


@dataclass(frozen=True, slots=True)
class LibraryLimits:
    """What the interception library enforces for one device: a `LibraryLimited` family's answer for a
    planned device (dra_driver/core/families), one line of the claim's limits file."""

    gpu_index: int
    gpu_uuid: GpuUUID
    memory_bytes: int
    cores: int  # SM limit in percent; 0 = none
    priority: int = 1  # 0 high, 1 normal
    ceiling: int = 0  # SM share it may burst to in the GPU's idle time (above cores); 0: none
    time_sliced: bool = True  # takes a slot in the GPU's time-division schedule
    policy: str | None = None  # claim-wide SM limit policy (SmLimitPolicy value); None: no opinion
    log_level: int | None = None  # claim-wide library log level; None: no opinion
    # opted into oversubscription: the bytes of `memory_bytes` the device holds for it (the rest may be
    # host-backed); None: every byte is device memory
    resident_bytes: int | None = None


@dataclass(frozen=True, slots=True)
class GpuLimitLine:
    """One GPU's line: what the library enforces there, and the claim's slot in the GPU's view. Read back, it
    is what the node reports a device holds (`Recording.allotment`)."""

    gpu_uuid: GpuUUID
    memory_bytes: int
    cores: int
    priority: int
    slot: int | None = None
    view: str | None = None
    ceiling: int = 0  # 0: none (no burst above cores)
    resident: int | None = None  # bytes held on the device when oversubscribed; None: all of memory_bytes


@dataclass(frozen=True, slots=True)
class LimitsFile:
    policy: str
    log_level: int
    gpus: tuple[GpuLimitLine, ...]


def limits_file(
    *, policy: str, log_level: int, limits: Sequence[LibraryLimits], slots: Mapping[GpuUUID, int]
) -> LimitsFile:
    """The file for a claim: one line per GPU the library limits, with its slot where it has one."""
    lines = []
    for lim in sorted(limits, key=lambda lim: lim.gpu_index):
        slot = slots.get(lim.gpu_uuid) if lim.time_sliced else None
        lines.append(
            GpuLimitLine(
                gpu_uuid=lim.gpu_uuid,
                memory_bytes=lim.memory_bytes,
                cores=lim.cores,
                priority=lim.priority,
                ceiling=lim.ceiling,
                resident=lim.resident_bytes,
                slot=slot,
                view=f"{container_gpu_dir(lim.gpu_uuid)}/{VIEW_FILE_NAME}" if slot is not None else None,
            )
        )
    return LimitsFile(policy=policy, log_level=log_level, gpus=tuple(lines))


def render_limits(f: LimitsFile) -> str:
    version = 3 if any(g.resident is not None for g in f.gpus) else 2 if any(g.ceiling for g in f.gpus) else 1
    lines = [f"version {version}", f"policy {f.policy}", f"loglevel {f.log_level}"]
    for g in f.gpus:
        line = f"gpu {g.gpu_uuid} memory {g.memory_bytes} cores {g.cores} priority {g.priority}"
        if g.ceiling:
            line += f" ceiling {g.ceiling}"
        if g.resident is not None:
            line += f" resident {g.resident}"
        if g.slot is not None and g.view is not None:
            line += f" slot {g.slot} view {g.view}"
        lines.append(line)
    return "\n".join(lines) + "\n"


def _number(word: str, what: str, low: int, high: int) -> int:
    if not word.isdigit() or not low <= int(word) <= high:
        raise ConfigError(f"limits file: {what} {word!r} is not an integer {low}-{high}")
    return int(word)


def _gpu_line(words: list[str], version: int) -> GpuLimitLine:
    if len(words) % 2:
        raise ConfigError(f"limits file: gpu line {' '.join(words)!r} has a key without a value")
    keys = dict(zip(words[2::2], words[3::2], strict=True))
    known = (
        {"memory", "cores", "priority", "slot", "view"}
        | ({"ceiling"} if version >= 2 else set())
        | ({"resident"} if version >= 3 else set())
    )
    unknown = sorted(set(keys) - known)
    if unknown:
        raise ConfigError(f"limits file: unknown key {unknown[0]!r} on a gpu line")
    if ("slot" in keys) != ("view" in keys):
        raise ConfigError("limits file: slot and view go together")
    memory = _number(keys.get("memory", "0"), "memory", 0, 1 << 62)
    if "resident" in keys and _number(keys["resident"], "resident", 0, 1 << 62) > memory:
        raise ConfigError("limits file: resident is more than memory (the claim's whole limit)")
    return GpuLimitLine(
        gpu_uuid=GpuUUID(words[1]),
        memory_bytes=memory,
        cores=_number(keys.get("cores", "0"), "cores", 0, 100),
        priority=_number(keys.get("priority", "1"), "priority", 0, 1),
        slot=_number(keys["slot"], "slot", 1, 65535) if "slot" in keys else None,
        view=keys.get("view"),
        ceiling=_number(keys["ceiling"], "ceiling", 1, 100) if "ceiling" in keys else 0,
        resident=_number(keys["resident"], "resident", 0, 1 << 62) if "resident" in keys else None,
    )


def parse_limits(text: str) -> LimitsFile:
    """Read a limits file `render_limits` wrote; ConfigError naming the line on anything else."""
    rows = [line.split() for line in text.splitlines() if line.strip()]
    versions = {str(v): v for v in READABLE_VERSIONS}
    if not rows or len(rows[0]) != 2 or rows[0][0] != "version" or rows[0][1] not in versions:
        raise ConfigError("limits file: the first line must be 'version 1', 'version 2' or 'version 3'")
    version = versions[rows[0][1]]
    policy, log_level, gpus = "default", 1, []
    for words in rows[1:]:
        if words[0] == "policy" and len(words) == 2 and words[1] in POLICIES:
            policy = words[1]
        elif words[0] == "loglevel" and len(words) == 2:
            log_level = _number(words[1], "loglevel", 0, 4)
        elif words[0] == "gpu" and len(words) >= 2:
            gpus.append(_gpu_line(words, version))
        else:
            raise ConfigError(f"limits file: unknown line {' '.join(words)!r}")
    return LimitsFile(policy=policy, log_level=log_level, gpus=tuple(gpus))
