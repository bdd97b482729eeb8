"""What the node keeps about a GPU's MPS control daemon, and how the control tool's answers read (pure).

The record (`mps.tessera.dev/v1` `MpsControlDaemon`, one per GPU, written by
`kubelet_plugin.host_parts.mps.control`) says which daemon Tessera started for a GPU, so that a restarted node
daemon adopts it instead of starting a second one, and start-up reconciliation knows what to stop. The
parsers read what `nvidia-cuda-mps-control` prints (shared/facts/mps.md): an active thread percentage as
`30.0`, a pinned memory limit as `512M` or, from 1 GiB on, whole GiB rounded down (`1536M` reads back `1G`).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from typing import Any

from dra_driver.io.documents import open_document
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.excerpt import excerpt
from dra_driver.vocabulary.names import GpuUUID

API_GROUP = "mps.tessera.dev"
API_VERSION = f"{API_GROUP}/v1"
KIND = "MpsControlDaemon"
MAX_RECORD_BYTES = 64 << 10
MIB = 1 << 20
GIB = 1 << 30
_LIMIT = re.compile(r"([0-9]{1,12})([MG])")
_PERCENT = re.compile(r"[0-9]{1,3}(\.[0-9]{1,6})?")


@dataclass(frozen=True, slots=True)
class MpsRecord:
    gpu_uuid: GpuUUID
    pid: int  # the control daemon's process, as its pid file said when it started
    tool: str  # the nvidia-cuda-mps-control that started it
    started_ns: int  # CLOCK_REALTIME, for humans and logs

    def __post_init__(self) -> None:
        if not self.gpu_uuid or "/" in self.gpu_uuid or self.gpu_uuid.startswith("."):
            raise ValueError(f"gpuUUID {excerpt(self.gpu_uuid)} is not a GPU UUID")
        if self.pid <= 0:
            raise ValueError(f"pid {self.pid} is not a process id")


def encode(record: MpsRecord) -> bytes:
    doc = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "gpuUUID": record.gpu_uuid,
        "pid": record.pid,
        "tool": record.tool,
        "startedNs": record.started_ns,
    }
    return (json.dumps(doc, indent=2) + "\n").encode()


def _field(doc: dict[str, Any], name: str, kind: type) -> Any:
    value = doc.get(name)
    if not isinstance(value, kind) or isinstance(value, bool):
        raise ValueError(f"{name} is {excerpt(value)}, expected a {kind.__name__}")
    return value


def decode(data: bytes, *, source: str) -> MpsRecord:
    """The record in `data`; StorageError naming what is wrong (UnsupportedVersionError: a newer one's)."""
    doc = open_document(data, source=source, api_version=API_VERSION, kind=KIND)
    try:
        return MpsRecord(
            gpu_uuid=GpuUUID(_field(doc, "gpuUUID", str)),
            pid=_field(doc, "pid", int),
            tool=_field(doc, "tool", str),
            started_ns=_field(doc, "startedNs", int),
        )
    except ValueError as e:
        raise StorageError(f"{source}: malformed content ({e}); the file is corrupt") from e


def format_pinned_limit(limit_bytes: int) -> str:
    """The value `set_default_device_pinned_mem_limit` takes: whole MiB, `<n>M`."""
    if limit_bytes < MIB:
        raise ValueError(
            f"a pinned memory limit of {limit_bytes} bytes is below 1 MiB, the smallest MPS takes"
        )
    return f"{limit_bytes // MIB}M"


def parse_pinned_limit(text: str) -> int:
    """Bytes from the control tool's display of a pinned memory limit (`512M`, `2G`)."""
    m = _LIMIT.fullmatch(text.strip())
    if not m:
        raise ValueError(f"{excerpt(text)} is not a pinned memory limit (<n>M or <n>G)")
    return int(m.group(1)) * (GIB if m.group(2) == "G" else MIB)


def shown_pinned_limit(limit_bytes: int) -> int:
    """What the control tool reads back after a limit of `limit_bytes` was set: whole GiB from 1 GiB on."""
    mib = limit_bytes // MIB * MIB
    return mib // GIB * GIB if mib >= GIB else mib


def parse_thread_percentage(text: str) -> float:
    """The control tool's active thread percentage (`30.0`)."""
    if not _PERCENT.fullmatch(text.strip()):
        raise ValueError(f"{excerpt(text)} is not an active thread percentage")
    value = float(text)
    if not 0 < value <= 100:
        raise ValueError(f"active thread percentage {value} is not above 0 and at most 100")
    return value
