"""A claim's limits file on the node: what prepare writes into the claim directory for the interception
library, and what the node's metrics and usage read back. The format is dra_driver/libtessera/limits_file.py;
the directory it lies in is kubelet_plugin/claims/claimdir.py (the daemon's copy, `<claim dir>/limits`, which
no container can write: they get it through a read-only mount).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path

from dra_driver.core import families
from dra_driver.core.allocation import ClaimPlan
from dra_driver.io.files import read_bounded
from dra_driver.libtessera.limits_file import (
    MAX_LIMITS_BYTES,
    GpuLimitLine,
    LimitsFile,
    limits_file,
    parse_limits,
    render_limits,
)
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.errors import ConfigError, StorageError
from dra_driver.vocabulary.names import Family, GpuUUID


def claim_limits(plan: ClaimPlan, records: Mapping[Family, Sequence[object]]) -> LimitsFile | None:
    """The claim's limits file: its planned limits, each time-sliced GPU's line with the slot its records
    hold there; None when no device of the claim uses the library."""
    if plan.library is None:
        return None
    slots = {
        gpu: slot
        for f in families.time_sliced()
        if f.name in records
        for gpu, slot in f.slots(records[f.name]).items()
    }
    return limits_file(
        policy=plan.library.policy, log_level=plan.library.log_level, limits=plan.limits(), slots=slots
    )


def limits_bytes(f: LimitsFile) -> bytes:
    """The file's content as written into the claim directory."""
    return render_limits(f).encode()


def read_limits(claim_dir: Path) -> dict[GpuUUID, GpuLimitLine]:
    """Each GPU's line of the claim's limits file; {} when it is gone or damaged (nothing to report)."""
    try:
        data = read_bounded(claim_dir / LIMITS_FILE_NAME, max_bytes=MAX_LIMITS_BYTES)
        parsed = parse_limits(data.decode("ascii", "replace"))
    except (OSError, StorageError, ConfigError):
        return {}
    return {g.gpu_uuid: g for g in parsed.gpus}
