"""What the node daemon takes from the NVIDIA driver's root: the NVML library it loads and the files each
claim's container gets (`dra_driver.io.driver_root` finds them); host parts that run the driver's tools
(MPS) are handed the root itself."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.io.driver_root import NVML_SONAME, DriverRoot, driver_files, open_driver_root
from dra_driver.vocabulary.inventory import NO_DRIVER_FILES, DriverFiles
from kubelet_plugin.serving.options import DaemonOptions

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DriverSetup:
    nvml_library: Path | None  # None: the loader's search path (no driver root given, or a simulated node)
    files: DriverFiles
    root: DriverRoot | None = None  # None: no --driver-root


def driver_setup(options: DaemonOptions) -> DriverSetup:
    """Without --driver-root: NVML from the loader's path, no driver files. With it: everything from the root;
    a root without libcuda/libnvidia-ml is a ConfigError."""
    if options.driver_root is None:
        return DriverSetup(nvml_library=None, files=NO_DRIVER_FILES)
    root = open_driver_root(options.driver_root, mount=options.driver_root_mount)
    files = driver_files(root)
    nvml = root.library(NVML_SONAME)
    log.info(
        "driver root",
        host=str(root.host),
        seen_at=str(root.visible),
        files=len(files.common),
        tools={f: len(m) for f, m in files.tools},
    )
    return DriverSetup(
        nvml_library=None if options.simulate is not None or nvml is None else root.visible_path(nvml),
        files=files,
        root=root,
    )
