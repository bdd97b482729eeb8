"""A driver root laid out as the NVIDIA installer leaves one: versioned libraries with soname links below a
library directory, the tools in usr/bin. Stand-in files by default; `sources` gives real files (the fake
libcuda/libnvidia-ml/MPS control of interceptor/build/fake) for a root that programs really load."""

from __future__ import annotations

import os
import shutil
from collections.abc import Mapping
from pathlib import Path

LIBRARY_DIR = "usr/lib/x86_64-linux-gnu"
DRIVER_VERSION = "580.159.04"
LIBRARIES = ("libcuda.so", "libnvidia-ml.so", "libnvidia-ptxjitcompiler.so")
TOOLS = ("nvidia-smi", "nvidia-cuda-mps-control", "nvidia-cuda-mps-server")


def install_driver(
    root: Path,
    *,
    libdir: str = LIBRARY_DIR,
    version: str = DRIVER_VERSION,
    absolute_links: bool = False,
    sources: Mapping[str, Path] | None = None,
) -> Path:
    """Lays out a driver below `root`; `sources` maps a soname (libcuda.so.1) or tool name to the file to
    install for it. Returns the library directory."""
    given = dict(sources or {})
    lib = root / libdir
    lib.mkdir(parents=True, exist_ok=True)
    (root / "usr/bin").mkdir(parents=True, exist_ok=True)
    for base in LIBRARIES:
        real = lib / f"{base}.{version}"
        source = given.get(f"{base}.1")
        if source is not None:
            shutil.copyfile(source, real)
        else:
            real.write_bytes(b"\x7fELF")
        target = f"/{libdir}/{real.name}" if absolute_links else real.name
        os.symlink(target, lib / f"{base}.1")
    for tool in TOOLS:
        path = root / "usr/bin" / tool
        source = given.get(tool)
        if source is not None:
            shutil.copyfile(source, path)
        else:
            path.write_bytes(b"#!/bin/sh\n")
        path.chmod(0o755)
    return lib
