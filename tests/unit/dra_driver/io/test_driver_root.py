"""Finding the driver's files below a driver root laid out as a host install or as the GPU Operator's."""

from __future__ import annotations

import os
from pathlib import Path, PurePosixPath

import pytest

from dra_driver.core.families import mps
from dra_driver.io.driver_root import AUTO, driver_files, open_driver_root
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import DriverMount
from tests.support.driver_root import install_driver as install

LIB = "usr/lib/x86_64-linux-gnu"


def test_a_host_install_seen_through_a_mount(tmp_path: Path) -> None:
    install(tmp_path)
    root = open_driver_root("/", mount=tmp_path)
    files = driver_files(root)
    assert DriverMount(f"/{LIB}/libcuda.so.580.159.04", f"/{LIB}/libcuda.so.580.159.04") in files.common
    assert DriverMount(f"/{LIB}/libcuda.so.580.159.04", f"/{LIB}/libcuda.so.1") in files.common
    assert DriverMount(f"/{LIB}/libnvidia-ml.so.580.159.04", f"/{LIB}/libnvidia-ml.so.1") in files.common
    assert DriverMount("/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi") in files.common
    assert {m.container_path for m in files.of(mps.NAME)} == {
        "/usr/bin/nvidia-cuda-mps-control",
        "/usr/bin/nvidia-cuda-mps-server",
    }
    assert root.library("libnvidia-ml.so.1") == PurePosixPath(f"{LIB}/libnvidia-ml.so.580.159.04")


def test_host_paths_name_the_root_and_absolute_links_stay_inside_it(tmp_path: Path) -> None:
    install(tmp_path, libdir="usr/lib64", absolute_links=True)
    root = open_driver_root("/run/nvidia/driver", mount=tmp_path)
    files = driver_files(root)
    assert (
        DriverMount("/run/nvidia/driver/usr/lib64/libcuda.so.580.159.04", "/usr/lib64/libcuda.so.1")
        in files.common
    )


def test_auto_prefers_the_operators_root_when_it_holds_a_driver(tmp_path: Path) -> None:
    install(tmp_path / "run/nvidia/driver")
    root = open_driver_root(AUTO, mount=tmp_path)
    assert (str(root.host), root.visible) == ("/run/nvidia/driver", tmp_path / "run/nvidia/driver")
    bare = tmp_path / "bare"
    install(bare)
    assert str(open_driver_root(AUTO, mount=bare).host) == "/"


def test_a_root_without_the_driver_names_the_root_and_the_fix(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match=r"no libcuda.so.1 below the driver root /srv/x .*driverRoot"):
        driver_files(open_driver_root("/srv/x", mount=tmp_path))
    with pytest.raises(ConfigError, match="neither an absolute path nor 'auto'"):
        open_driver_root("run/nvidia/driver")


def test_link_loops_and_dangling_links_find_nothing(tmp_path: Path) -> None:
    (tmp_path / LIB).mkdir(parents=True)
    os.symlink("libcuda.so.1", tmp_path / LIB / "libcuda.so.1")
    os.symlink("gone.so", tmp_path / LIB / "libnvidia-ml.so.1")
    root = open_driver_root("/", mount=tmp_path)
    assert root.library("libcuda.so.1") is None
    assert root.library("libnvidia-ml.so.1") is None
