"""The per-claim CDI spec files, written atomically through `dra_driver.files`."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from cdi.spec import Spec
from dra_driver.errors import ConfigError, StorageError
from dra_driver.files import WriteFault, atomic_write, is_temp, remove_durably
from dra_driver.names import ClaimUID, cdi_spec_file_name, parse_cdi_spec_file_name


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
