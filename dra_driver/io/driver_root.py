"""The NVIDIA driver's user-space files below a driver root (I/O adapter).

A driver root is where the driver's files live, seen from the host: `/` for a driver installed on the host,
`/run/nvidia/driver` for the GPU Operator's driver container. The node plugin sees that root at another path
(the chart mounts it at /driver-root), so every file is known twice: the path this process opens (`visible`)
and the host path a CDI spec must name (`host`). Inside a claim's container a file sits where it sits below
the root (`/usr/lib/x86_64-linux-gnu/libcuda.so.580.x`), and each library is also mounted at its soname
(`libcuda.so.1`), which is what a loader without the toolkit's ld-cache hook finds in the system search path.
"""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path, PurePosixPath

from dra_driver.core import families
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import DriverFiles, DriverMount

AUTO = "auto"
OPERATOR_ROOT = PurePosixPath("/run/nvidia/driver")  # the GPU Operator's driver container, seen by the host
# Where the libraries of a host install live, by distribution family; searched in this order.
LIBRARY_DIRS = (
    "usr/lib/x86_64-linux-gnu",
    "usr/lib64",
    "usr/lib",
    "lib/x86_64-linux-gnu",
    "lib64",
    "lib",
)
TOOL_DIRS = ("usr/bin", "bin", "usr/sbin")
NVML_SONAME = "libnvidia-ml.so.1"
CUDA_SONAME = "libcuda.so.1"
# What a CUDA program needs of the driver; the first two must be there, the others are used when present.
REQUIRED_LIBRARIES = (CUDA_SONAME, NVML_SONAME)
OPTIONAL_LIBRARIES = (
    "libnvidia-ptxjitcompiler.so.1",
    "libnvidia-nvvm.so.4",
    "libcudadebugger.so.1",
)
TOOLS = ("nvidia-smi", "nvidia-debugdump")
_MAX_LINKS = 16


@dataclass(frozen=True, slots=True)
class DriverRoot:
    """A driver root: its path on the host, and where this process sees it."""

    host: PurePosixPath
    visible: Path

    def host_path(self, relative: PurePosixPath) -> str:
        return str(self.host / relative)

    def resolve(self, relative: PurePosixPath) -> PurePosixPath | None:
        """`relative` with its symbolic links followed inside the root (an absolute link target means the
        root's own `/`, not this process's); None when it does not name a file."""
        parts = list(relative.parts)
        done = PurePosixPath()
        links = 0
        while parts:
            part = parts.pop(0)
            if part in ("", "."):
                continue
            if part == "..":
                done = done.parent
                continue
            candidate = done / part
            seen = self.visible / candidate
            if seen.is_symlink():
                links += 1
                if links > _MAX_LINKS:
                    return None
                target = PurePosixPath(os.readlink(seen))
                parts = list(target.parts[1:] if target.is_absolute() else target.parts) + parts
                if target.is_absolute():
                    done = PurePosixPath()
                continue
            done = candidate
        return done if (self.visible / done).is_file() else None

    def find(self, name: str, directories: tuple[str, ...]) -> PurePosixPath | None:
        """The first `<dir>/<name>` below the root that is a file (after links), as the root-relative path
        of the file itself."""
        for d in directories:
            found = self.resolve(PurePosixPath(d) / name)
            if found is not None:
                return found
        return None

    def library(self, soname: str) -> PurePosixPath | None:
        return self.find(soname, LIBRARY_DIRS)

    def tool(self, name: str) -> PurePosixPath | None:
        return self.find(name, TOOL_DIRS)

    def visible_path(self, relative: PurePosixPath) -> Path:
        return self.visible / relative


def _has_driver(visible: Path) -> bool:
    root = DriverRoot(host=PurePosixPath("/"), visible=visible)
    return root.library(NVML_SONAME) is not None


def open_driver_root(requested: str, *, mount: Path | None = None) -> DriverRoot:
    """The driver root `requested` (a host path, or `auto`), seen by this process at `mount` (default: the
    host path itself). `auto`: the GPU Operator's root when it holds a driver, else the host's `/`; with
    `auto`, `mount` is where the host's `/` is seen."""
    if requested != AUTO and not requested.startswith("/"):
        raise ConfigError(
            f"--driver-root: {requested!r} is neither an absolute path nor 'auto' (e.g. / for a driver "
            f"installed on the host, {OPERATOR_ROOT} for the GPU Operator's driver container)"
        )
    if requested == AUTO:
        seen = mount or Path("/")
        operator = seen / OPERATOR_ROOT.relative_to("/")
        if _has_driver(operator):
            return DriverRoot(host=OPERATOR_ROOT, visible=operator)
        return DriverRoot(host=PurePosixPath("/"), visible=seen)
    return DriverRoot(host=PurePosixPath(requested), visible=mount or Path(requested))


def _mounts(root: DriverRoot, relative: PurePosixPath, *, alias: str | None = None) -> list[DriverMount]:
    """The file at its own path, and at `alias` beside it when that is another name (a soname)."""
    own = f"/{relative}"
    mounts = [DriverMount(host_path=root.host_path(relative), container_path=own)]
    if alias is not None and alias != relative.name:
        alias_path = f"/{relative.parent}/{alias}"
        mounts.append(DriverMount(host_path=root.host_path(relative), container_path=alias_path))
    return mounts


def driver_files(root: DriverRoot) -> DriverFiles:
    """What a CUDA container needs of the driver under `root`; a missing libcuda or libnvidia-ml is a
    configuration error that names the root and the fix."""
    common: list[DriverMount] = []
    for soname in REQUIRED_LIBRARIES:
        found = root.library(soname)
        if found is None:
            raise ConfigError(
                f"no {soname} below the driver root {root.host} (seen at {root.visible}; searched "
                f"{', '.join(LIBRARY_DIRS)}): set the chart's driverRoot (--driver-root) to where the NVIDIA "
                f"driver is installed (/ on the host, {OPERATOR_ROOT} with the GPU Operator)"
            )
        common += _mounts(root, found, alias=soname)
    for soname in OPTIONAL_LIBRARIES:
        found = root.library(soname)
        if found is not None:
            common += _mounts(root, found, alias=soname)
    for tool in TOOLS:
        found = root.tool(tool)
        if found is not None:
            common += _mounts(root, found, alias=tool)
    tools: list[tuple[str, tuple[DriverMount, ...]]] = []
    for f in families.FAMILIES:
        mounts = [
            m
            for tool in f.driver_tools
            if (found := root.tool(tool))
            for m in _mounts(root, found, alias=tool)
        ]
        if mounts:
            tools.append((f.name, tuple(mounts)))
    return DriverFiles(common=tuple(common), tools=tuple(tools))
