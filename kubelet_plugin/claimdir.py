"""Per-claim host directories for vgpu claims, and the limits file the interception library reads.

The directory appears atomically (built under a temp name, then renamed), so the library never sees a
directory without its limits file. The `region` file inside is created by the library itself.
"""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from pathlib import Path

from dra_driver.allocation import ClaimPlan
from dra_driver.errors import StorageError
from dra_driver.files import WriteFault, atomic_write, fsync_dir, is_temp, temp_name
from dra_driver.names import LIMITS_FILE_NAME, ClaimUID, Family

LIMITS_VERSION = 1
# Any uid in the claim's containers must be able to create the accounting region here; the sticky bit
# keeps them from replacing the root-owned limits file.
DIR_MODE = 0o1777


def render_limits(plan: ClaimPlan) -> str:
    """The limits file: one line per vgpu device keyed by GPU UUID (robust to device reordering)."""
    if plan.vgpu is None:
        raise ValueError("only claims with vgpu devices have a limits file")
    lines = [
        f"version {LIMITS_VERSION}",
        f"policy {plan.vgpu.sm_limit_policy.value}",
        f"loglevel {plan.vgpu.log_level}",
    ]
    for d in sorted(plan.devices, key=lambda d: d.gpu_index):
        if d.family is Family.VGPU and d.limits is not None:
            lines.append(
                f"gpu {d.gpu_uuid} memory {d.limits.memory_bytes} cores {d.limits.cores} "
                f"priority {plan.vgpu.priority}"
            )
    return "\n".join(lines) + "\n"


def _write_durably(path: Path, data: bytes, *, fault: WriteFault | None) -> None:
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, 0o644)
    try:
        view = memoryview(data)
        if fault is not None:
            fault()
        while view:
            view = view[os.write(fd, view) :]
        os.fsync(fd)
    finally:
        os.close(fd)


class ClaimDirs:
    def __init__(self, *, root: Path) -> None:
        self._root = root

    def path(self, uid: ClaimUID) -> Path:
        return self._root / uid

    def write(self, uid: ClaimUID, *, limits: str, fault: WriteFault | None = None) -> Path:
        """Create the claim dir with its limits file, or rewrite the limits file of an existing one."""
        final = self.path(uid)
        data = limits.encode()
        if final.is_dir():
            atomic_write(final / LIMITS_FILE_NAME, data, fault=fault)
            return final
        staging = temp_name(final)
        try:
            self._root.mkdir(parents=True, exist_ok=True)
            staging.mkdir()
            staging.chmod(DIR_MODE)  # not subject to the umask: containers run as any user
            # The staging dir is the atomic unit: its limits file needs no temp name of its own.
            _write_durably(staging / LIMITS_FILE_NAME, data, fault=fault)
            fsync_dir(staging)
            staging.rename(final)
            fsync_dir(self._root)
        except (OSError, StorageError) as e:
            shutil.rmtree(staging, ignore_errors=True)
            if isinstance(e, StorageError):
                raise
            raise StorageError(f"creating claim directory {final}: {e.strerror or e}") from e
        return final

    def remove(self, uid: ClaimUID) -> bool:
        """Remove the claim dir; renamed away first so a crash never leaves a half-emptied live dir."""
        final = self.path(uid)
        if not final.exists():
            return False
        doomed = temp_name(final)
        try:
            final.rename(doomed)
            fsync_dir(self._root)
        except OSError as e:
            raise StorageError(f"removing claim directory {final}: {e.strerror or e}") from e
        shutil.rmtree(doomed, ignore_errors=True)
        return True

    def uids(self) -> Iterator[ClaimUID]:
        try:
            names = sorted(os.listdir(self._root))
        except FileNotFoundError:
            return
        for name in names:
            if not is_temp(name) and (self._root / name).is_dir():
                yield ClaimUID(name)

    def remove_stale_temps(self) -> list[Path]:
        """Staging or doomed dirs a killed process left behind."""
        removed = []
        try:
            names = sorted(os.listdir(self._root))
        except FileNotFoundError:
            return []
        for name in names:
            if is_temp(name):
                shutil.rmtree(self._root / name, ignore_errors=True)
                removed.append(self._root / name)
        return removed
