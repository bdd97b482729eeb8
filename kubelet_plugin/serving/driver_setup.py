"""What the node daemon takes from the NVIDIA driver's root: the NVML library it loads, the files each claim's
container gets, the MPS control tool, and how MPS daemons are started (`dra_driver.system.driver_root` finds
the files; `kubelet_plugin.node.host_launch` starts daemons on the host)."""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path, PurePosixPath

import structlog

from dra_driver.system.driver_root import MPS_CONTROL, NVML_SONAME, DriverRoot, driver_files, open_driver_root
from dra_driver.values.model import NO_DRIVER_FILES, DriverFiles
from kubelet_plugin.node.host_launch import HostLauncher
from kubelet_plugin.serving.options import DaemonOptions

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class DriverSetup:
    nvml_library: Path | None  # None: the loader's search path (no driver root given, or a simulated node)
    files: DriverFiles
    mps_control: str  # the control tool as this process runs it
    launcher: HostLauncher | None = None  # where MPS daemons start: None in this process's container


def driver_setup(options: DaemonOptions) -> DriverSetup:
    """Without --driver-root: NVML from the loader's path, no driver files, the MPS tool from --mps-control or
    PATH. With it: everything from the root; a root without libcuda/libnvidia-ml is a ConfigError."""
    if options.driver_root is None:
        return DriverSetup(
            nvml_library=None,
            files=NO_DRIVER_FILES,
            mps_control=options.mps_control or MPS_CONTROL,
            launcher=HostLauncher(cgroup=options.mps_host_cgroup) if options.mps_host_cgroup else None,
        )
    root = open_driver_root(options.driver_root, mount=options.driver_root_mount)
    files = driver_files(root)
    nvml = root.library(NVML_SONAME)
    tool = root.tool(MPS_CONTROL)
    mps_control = options.mps_control or (str(root.visible_path(tool)) if tool is not None else MPS_CONTROL)
    log.info(
        "driver root",
        host=str(root.host),
        seen_at=str(root.visible),
        files=len(files.common),
        mps_files=len(files.mps),
        mps_control=mps_control,
    )
    return DriverSetup(
        nvml_library=None if options.simulate is not None or nvml is None else root.visible_path(nvml),
        files=files,
        mps_control=mps_control,
        launcher=_launcher(options, root, tool, nvml),
    )


def _launcher(
    options: DaemonOptions, root: DriverRoot, tool: PurePosixPath | None, nvml: PurePosixPath | None
) -> HostLauncher | None:
    """On the host, the driver root's tool runs by its host path, with the root's libraries on the loader's
    path where the root is not the host's own (the GPU Operator's)."""
    if not options.mps_host_cgroup:
        return None
    host_paths = {str(root.visible_path(tool)): root.host_path(tool)} if tool is not None else {}
    env = {"LD_LIBRARY_PATH": root.host_path(nvml.parent)} if str(root.host) != "/" and nvml else {}
    return HostLauncher(cgroup=options.mps_host_cgroup, host_paths=host_paths, env=env)
