"""What of the NVML backend runs without a GPU: error translation, /proc parsing, value mapping, and the
real failure of opening NVML on a host without the driver."""

from __future__ import annotations

from pathlib import Path

import pynvml
import pytest

from dra_driver.backends.device_nodes import cap_minor, char_major, mig_cap_nodes
from dra_driver.backends.nvml import (
    NvmlBackend,
    architecture_of,
    cuda_version_text,
    multiprocessors_from_cores,
    profile_name,
    translate,
)
from dra_driver.vocabulary.errors import InventoryError, MigError, PlacementTakenError
from dra_driver.vocabulary.inventory import Architecture


def test_insufficient_resources_on_mig_create_is_placement_taken() -> None:
    err = translate(pynvml.NVMLError(pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES), "creating", mig=True)
    assert isinstance(err, PlacementTakenError) and "creating" in str(err)


def test_other_errors_keep_their_family() -> None:
    in_use = translate(pynvml.NVMLError(pynvml.NVML_ERROR_IN_USE), "destroying", mig=True)
    assert type(in_use) is MigError and "still use it" in str(in_use)
    lost = translate(pynvml.NVMLError(pynvml.NVML_ERROR_GPU_IS_LOST), "reading")
    assert type(lost) is InventoryError
    perm = translate(pynvml.NVMLError(pynvml.NVML_ERROR_NO_PERMISSION), "setting MIG mode", mig=True)
    assert type(perm) is MigError and "root" in str(perm)


def test_opening_without_a_driver_is_an_inventory_error() -> None:
    try:
        pynvml.nvmlInit()
    except pynvml.NVMLError:
        with pytest.raises(InventoryError, match="NVIDIA driver"):
            NvmlBackend.open()
    else:  # pragma: no cover - only on a host with a GPU
        pynvml.nvmlShutdown()
        backend = NvmlBackend.open()
        assert backend.inventory().driver_version
        backend.close()


def test_architecture_and_versions() -> None:
    assert architecture_of(pynvml.NVML_DEVICE_ARCH_AMPERE) is Architecture.AMPERE
    assert architecture_of(pynvml.NVML_DEVICE_ARCH_HOPPER) is Architecture.HOPPER
    assert architecture_of(pynvml.NVML_DEVICE_ARCH_BLACKWELL) is Architecture.BLACKWELL
    assert architecture_of(pynvml.NVML_DEVICE_ARCH_UNKNOWN) is Architecture.UNKNOWN
    assert cuda_version_text(12040) == "12.4" and cuda_version_text(12020) == "12.2"
    assert cuda_version_text(11080) == "11.8"


def test_profile_names() -> None:
    assert profile_name("MIG 1g.10gb") == "1g.10gb"
    assert profile_name("MIG 1g.10gb+me") == "1g.10gb+me"
    assert profile_name("7g.80gb") == "7g.80gb"
    assert profile_name("MIG 1g.24gb+gfx") is None
    assert profile_name("MIG 1g.10gb-me") is None


def test_multiprocessors_from_cuda_cores() -> None:
    assert multiprocessors_from_cores(16896, "9.0") == 132  # H100 SXM
    assert multiprocessors_from_cores(6912, "8.0") == 108  # A100
    assert multiprocessors_from_cores(7424, "8.9") == 58  # L4


def test_char_major_reads_only_character_devices(tmp_path: Path) -> None:
    devices = tmp_path / "devices"
    devices.write_text(
        "Character devices:\n  1 mem\n195 nvidia-frontend\n236 nvidia-caps\n510 nvidia-uvm\n\n"
        "Block devices:\n  7 loop\n 99 nvidia-caps\n"
    )
    assert char_major("nvidia-caps", devices) == 236
    assert char_major("nvidia-uvm", devices) == 510
    assert char_major("loop", devices) is None
    assert char_major("nvidia-caps", tmp_path / "missing") is None


def test_mig_cap_nodes_from_proc_files(tmp_path: Path) -> None:
    gi = tmp_path / "gpu3" / "mig" / "gi5"
    (gi / "ci0").mkdir(parents=True)
    (gi / "access").write_text("DeviceFileMinor: 48\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    (gi / "ci0" / "access").write_text("DeviceFileMinor: 49\nDeviceFileMode: 292\nDeviceFileModify: 1\n")
    nodes = mig_cap_nodes(gpu_minor=3, gi_id=5, ci_id=0, caps_major=236, caps_root=tmp_path)
    assert [(n.path, n.major, n.minor) for n in nodes] == [
        ("/dev/nvidia-caps/nvidia-cap48", 236, 48),
        ("/dev/nvidia-caps/nvidia-cap49", 236, 49),
    ]


def test_cap_minor_errors_name_the_file(tmp_path: Path) -> None:
    broken = tmp_path / "access"
    broken.write_text("DeviceFileMode: 292\n")
    with pytest.raises(MigError, match="no DeviceFileMinor"):
        cap_minor(broken)
    with pytest.raises(MigError, match="cannot read"):
        cap_minor(tmp_path / "absent")


def test_nvml_events_become_faults() -> None:
    from dra_driver.backends.nvml_health import NvmlHealthWatcher, fault_of_event  # noqa: PLC0415
    from dra_driver.vocabulary.inventory import FaultKind, GpuFault  # noqa: PLC0415
    from dra_driver.vocabulary.names import GpuUUID  # noqa: PLC0415

    xid = pynvml.nvmlEventTypeXidCriticalError
    assert fault_of_event(xid, 79) == GpuFault(FaultKind.LOST, xid=79)
    assert fault_of_event(xid, 48, 3) == GpuFault(FaultKind.XID, xid=48, detail="MIG GPU instance 3")
    assert fault_of_event(xid, 13) is None  # the application's fault
    assert fault_of_event(pynvml.nvmlEventTypeDoubleBitEccError, 0) == GpuFault(FaultKind.ECC_DBE)
    assert fault_of_event(pynvml.nvmlEventTypePState, 0) is None
    seen: list[GpuFault] = []
    watcher = NvmlHealthWatcher(on_fault=lambda _uuid, f: seen.append(f))
    watcher.record(GpuUUID("GPU-1"), GpuFault(FaultKind.ECC_DBE))
    watcher.record(GpuUUID("GPU-1"), GpuFault(FaultKind.ECC_DBE))  # the same fault again: kept once
    assert watcher.faults(GpuUUID("GPU-1")) == (GpuFault(FaultKind.ECC_DBE),) and len(seen) == 1
    assert watcher.faults(GpuUUID("GPU-2")) == ()
