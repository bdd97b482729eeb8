"""The MPS host part's flags and what they make of the driver root: which control tool runs, where, and with
which loader path (kubelet_plugin/host_parts/mps/__init__.py, `control_of`)."""

from __future__ import annotations

import os
from pathlib import Path

from dra_driver.core.families import mps
from kubelet_plugin.host_parts.mps import OPTIONS, control_of
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.serving.driver_setup import driver_setup
from kubelet_plugin.serving.options import DaemonOptions
from tests.support.driver_root import install_driver as install


def test_its_flags_are_its_own() -> None:
    assert [(o.flag, o.dest) for o in OPTIONS] == [
        ("--mps-dir", "mps_dir"),
        ("--mps-control", "mps_control"),
        ("--mps-host-cgroup", "mps_host_cgroup"),
    ]


def test_the_operators_driver_root_puts_its_libraries_on_the_daemons_loader_path(tmp_path: Path) -> None:
    install(tmp_path)
    setup = driver_setup(
        DaemonOptions(node_name="n", driver_root="/run/nvidia/driver", driver_root_mount=tmp_path)
    )
    assert setup.nvml_library == tmp_path / "usr/lib/x86_64-linux-gnu/libnvidia-ml.so.580.159.04"
    # the MPS host part runs the root's tool, on the host by its host path, with the root's libraries
    paths = PluginPaths.under(tmp_path / "node")
    control = control_of(options={"mps_host_cgroup": "/tessera-mps"}, driver_root=setup.root, paths=paths)
    assert control.launcher is not None
    assert control.tool == os.fspath(tmp_path / "usr/bin/nvidia-cuda-mps-control")
    assert (
        control.launcher.command([control.tool, "-d"])[3]
        == "/run/nvidia/driver/usr/bin/nvidia-cuda-mps-control"
    )
    assert control.launcher.env == {"LD_LIBRARY_PATH": "/run/nvidia/driver/usr/lib/x86_64-linux-gnu"}
    host = driver_setup(DaemonOptions(node_name="n", driver_root="/", driver_root_mount=tmp_path))
    on_host = control_of(options={"mps_host_cgroup": "/m"}, driver_root=host.root, paths=paths)
    assert on_host.launcher is not None and on_host.launcher.env == {}
    # without a cgroup the daemons start in the plugin's container; without a root the tool is found on PATH
    inside = control_of(options={}, driver_root=None, paths=paths)
    assert (inside.launcher, inside.tool, inside.root) == (
        None,
        "nvidia-cuda-mps-control",
        paths.family_dir(mps.NAME),
    )
