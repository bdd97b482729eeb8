"""The control plane's files (state, kubeconfigs, keys) are private by default."""

from __future__ import annotations

from pathlib import Path

from dra_driver.io.files import atomic_write


def write_atomic(path: Path, data: bytes, *, mode: int = 0o600) -> None:
    atomic_write(path, data, mode=mode)
