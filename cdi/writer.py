"""The per-claim CDI spec files, written atomically through `dra_driver.io.files`.

Anything in the CDI directory under one of our spec names is ours: a directory, a link or a FIFO there is
removed (never followed) before a spec is written in its place or when the claim goes.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

from cdi.spec import Spec
from dra_driver.io.files import WriteFault, atomic_write, is_temp, read_bounded
from dra_driver.io.safe_tree import is_plain_file, remove_tree
from dra_driver.vocabulary.errors import CdiSpecError, StorageError
from dra_driver.vocabulary.names import (
    ClaimUID,
    cdi_spec_file_name,
    cdi_spec_temp_prefix,
    parse_cdi_spec_file_name,
)

SPEC_MODE = 0o644  # container runtimes read it; other host users may too (it holds no secret)
MAX_SPEC_BYTES = 1 << 20  # ours are a few KiB


def spec_path(cdi_dir: Path, claim_uid: ClaimUID) -> Path:
    return cdi_dir / cdi_spec_file_name(ClaimUID(claim_uid))  # checked again where it becomes a path


def write_spec(cdi_dir: Path, claim_uid: ClaimUID, spec: Spec, *, fault: WriteFault | None = None) -> Path:
    """Write the claim's spec; CdiSpecError when it cannot."""
    path = spec_path(cdi_dir, claim_uid)
    data = json.dumps(spec.to_dict(), indent=1, sort_keys=True).encode()
    try:
        if os.path.lexists(path) and not is_plain_file(path):
            remove_tree(path)  # a directory or link under our name cannot be replaced by a rename
        # not fsync'd: after a power loss the containers are gone and start-up checks every spec again
        atomic_write(path, data, mode=SPEC_MODE, durable=False, fault=fault)
    except StorageError as e:
        raise CdiSpecError(str(e)) from e
    return path


def read_spec(path: Path) -> Spec:
    """The spec in `path`; CdiSpecError when it is missing, not a regular file, too large or not a spec."""
    try:
        doc = json.loads(read_bounded(path, max_bytes=MAX_SPEC_BYTES))
        if not isinstance(doc, dict):
            raise ValueError("not a JSON object")
        return Spec.from_dict(doc)
    except FileNotFoundError as e:
        raise CdiSpecError(f"reading CDI spec {path}: it is missing") from e
    except (ValueError, RecursionError) as e:  # SpecError is a ValueError
        raise CdiSpecError(f"reading CDI spec {path}: not a valid spec ({e})") from e
    except StorageError as e:  # not a regular file, or too large
        raise CdiSpecError(str(e)) from e


def remove_spec(cdi_dir: Path, claim_uid: ClaimUID) -> bool:
    """Remove whatever is under the claim's spec name; False if nothing was. CdiSpecError when it cannot."""
    path = spec_path(cdi_dir, claim_uid)
    try:
        return remove_tree(path) > 0
    except StorageError as e:
        raise CdiSpecError(str(e)) from e


def list_specs(cdi_dir: Path) -> Iterator[tuple[ClaimUID, Path]]:
    """Entries under our spec names in the CDI directory (other vendors' files are never touched)."""
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
    prefix = cdi_spec_temp_prefix()
    for name in names:
        if is_temp(name) and name.startswith(prefix):
            yield cdi_dir / name
