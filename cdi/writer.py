"""Atomic file writes (temp → fsync → rename → fsync dir) and the per-claim CDI spec files.

A failed write leaves nothing behind: the temp file is removed, and the target is either the old content or
the new, never a mix. `atomic_write` is shared by every on-disk format Tessera keeps.
"""

from __future__ import annotations

import json
import os
import secrets
from collections.abc import Callable, Iterator
from pathlib import Path

from cdi.spec import Spec
from dra_driver.errors import ConfigError, StorageError
from dra_driver.names import ClaimUID, cdi_spec_file_name, parse_cdi_spec_file_name

TEMP_MARK = ".tmp-"
# Test-only hook run after part of the data is written (raise OSError to simulate a full disk).
WriteFault = Callable[[], None]


def fsync_dir(directory: Path) -> None:
    fd = os.open(directory, os.O_RDONLY | os.O_DIRECTORY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def temp_name(path: Path) -> Path:
    return path.with_name(f".{path.name}{TEMP_MARK}{secrets.token_hex(4)}")


def is_temp(name: str) -> bool:
    return name.startswith(".") and TEMP_MARK in name


def atomic_write(path: Path, data: bytes, *, mode: int = 0o644, fault: WriteFault | None = None) -> None:
    """Replace `path` with `data` durably; raises StorageError and leaves no temp file on failure."""
    tmp = temp_name(path)
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_CLOEXEC, mode)
        try:
            half = len(data) // 2
            os.write(fd, data[:half])
            if fault is not None:
                fault()
            view = memoryview(data)[half:]
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        os.replace(tmp, path)
        fsync_dir(path.parent)
    except OSError as e:
        tmp.unlink(missing_ok=True)
        raise StorageError(f"writing {path}: {e.strerror or e}") from e


def remove_durably(path: Path) -> bool:
    """Remove a file and persist the removal; False if it was not there."""
    try:
        path.unlink()
    except FileNotFoundError:
        return False
    except OSError as e:
        raise StorageError(f"removing {path}: {e.strerror or e}") from e
    fsync_dir(path.parent)
    return True


def spec_path(cdi_dir: Path, claim_uid: ClaimUID) -> Path:
    return cdi_dir / cdi_spec_file_name(claim_uid)


def write_spec(cdi_dir: Path, claim_uid: ClaimUID, spec: Spec, *, fault: WriteFault | None = None) -> Path:
    path = spec_path(cdi_dir, claim_uid)
    data = json.dumps(spec.to_dict(), indent=1, sort_keys=True).encode()
    atomic_write(path, data, fault=fault)
    return path


def read_spec(path: Path) -> Spec:
    try:
        return Spec.from_dict(json.loads(path.read_bytes()))
    except (OSError, ValueError, ConfigError) as e:
        raise StorageError(f"reading CDI spec {path}: {e}") from e


def remove_spec(cdi_dir: Path, claim_uid: ClaimUID) -> bool:
    return remove_durably(spec_path(cdi_dir, claim_uid))


def list_specs(cdi_dir: Path) -> Iterator[tuple[ClaimUID, Path]]:
    """Our spec files in the CDI directory (other vendors' files are never touched)."""
    try:
        names = sorted(os.listdir(cdi_dir))
    except FileNotFoundError:
        return
    for name in names:
        uid = parse_cdi_spec_file_name(name)
        if uid is not None:
            yield uid, cdi_dir / name


def stale_temp_files(cdi_dir: Path) -> Iterator[Path]:
    """Temp files our own writes left when the process was killed mid-write."""
    try:
        names = sorted(os.listdir(cdi_dir))
    except FileNotFoundError:
        return
    prefix = "." + cdi_spec_file_name(ClaimUID("")).removesuffix(".json")
    for name in names:
        if is_temp(name) and name.startswith(prefix):
            yield cdi_dir / name
