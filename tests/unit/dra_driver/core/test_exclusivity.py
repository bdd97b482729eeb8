"""The prepare side's exclusivity check: which devices on one GPU exclude each other, and what errors say."""

from __future__ import annotations

import pytest

from dra_driver.core.exclusivity import HeldDevice, check_exclusive
from dra_driver.core.families import parse_device_name
from dra_driver.core.families.base import AnyPlanned, PlannedDevice
from dra_driver.vocabulary.errors import ClaimError, ExclusivityError
from dra_driver.vocabulary.names import DeviceName, GpuUUID
from tests.support.inventories import make_gpu, make_inventory

NODE = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM"), make_gpu(2, "L4"))


def planned(device: str, request: str = "gpu") -> AnyPlanned:
    index = parse_device_name(device).index
    return PlannedDevice(
        request=request,
        device=DeviceName(device),
        family=parse_device_name(device).family.name,
        gpu_index=index,
        gpu_uuid=GpuUUID(f"GPU-{index}"),
        share_id=None,
        config=None,
        spec=None,
    )


def refusal(devices: list[str], held: list[str]) -> str | None:
    """The error for a claim ns/new of `devices` while ns/old holds `held`; None when it is accepted."""
    try:
        check_exclusive(
            [planned(d) for d in devices],
            claim="ns/new",
            held=[HeldDevice("ns/old", h) for h in held],
            inventory=NODE,
        )
    except ExclusivityError as e:
        assert isinstance(e, ClaimError)  # reported per claim, like every other prepare failure
        return str(e)
    return None


@pytest.mark.parametrize(
    ("device", "held"),
    [
        ("gpu-0", "gpu-0"),
        ("gpu-0", "gpu-0-vgpu"),
        ("gpu-0", "gpu-0-mps"),
        ("gpu-0", "gpu-0-mig-1g10gb-6"),
        ("gpu-0-vgpu", "gpu-0"),
        ("gpu-0-vgpu", "gpu-0-mps"),
        ("gpu-0-vgpu", "gpu-0-mig-7g80gb-0"),
        ("gpu-0-mps", "gpu-0-vgpu"),
        ("gpu-0-mps", "gpu-0-mig-1g10gb-me-0"),
        ("gpu-0-mig-1g10gb-3", "gpu-0"),
        ("gpu-0-mig-1g10gb-3", "gpu-0-vgpu"),
        ("gpu-0-mig-1g10gb-3", "gpu-0-mps"),
        ("gpu-0-mig-3g40gb-0", "gpu-0-mig-1g10gb-3"),  # slices 0-3 hold slice 3
        ("gpu-0-mig-1g10gb-4", "gpu-0-mig-4g40gb-4"),
        ("gpu-0-mig-1g10gb-2", "gpu-0-mig-1g10gb-2"),  # one placement, two claims
        ("gpu-2", "gpu-2-vgpu"),  # a GPU without MIG is one slice
    ],
)
def test_devices_that_exclude_each_other_on_one_gpu_are_refused(device: str, held: str) -> None:
    assert refusal([device], [held]) is not None


@pytest.mark.parametrize(
    ("device", "held"),
    [
        ("gpu-0-vgpu", "gpu-0-vgpu"),  # shares of one GPU: capacity is the scheduler's to count
        ("gpu-0-mps", "gpu-0-mps"),
        ("gpu-0-mig-1g10gb-3", "gpu-0-mig-1g10gb-4"),
        ("gpu-0-mig-3g40gb-0", "gpu-0-mig-4g40gb-4"),
        ("gpu-0", "gpu-1"),
        ("gpu-0", "gpu-1-vgpu"),
        ("gpu-1-mig-7g80gb-0", "gpu-0-mig-7g80gb-0"),
        ("gpu-0", "gpu-7"),  # a device on no GPU of this node holds nothing here
        ("gpu-0", "not-a-device"),
    ],
)
def test_devices_that_coexist_are_accepted(device: str, held: str) -> None:
    assert refusal([device], [held]) is None


def test_the_error_names_both_claims_both_devices_and_the_cause() -> None:
    message = refusal(["gpu-0"], ["gpu-0-vgpu"])
    assert message == (
        "device gpu-0 (request gpu) is a whole GPU on GPU 0, but claim ns/old prepared on this node holds "
        "device gpu-0-vgpu (a vGPU share) there and the two exclude each other. The scheduler allocated "
        "conflicting devices (a stale or republished ResourceSlice, kubernetes/kubernetes#140806); claim "
        "ns/old is left as it is: delete this claim's pod so it is scheduled again once the GPU is free"
    )
    mig = refusal(["gpu-0-mig-3g40gb-4"], ["gpu-0-mig-1g10gb-5"])
    assert mig is not None
    assert "MIG 3g.40gb at memory slice 4" in mig and "(MIG 1g.10gb at memory slice 5)" in mig


def test_two_devices_of_one_claim_that_exclude_each_other_are_refused() -> None:
    message = refusal(["gpu-1-vgpu", "gpu-1"], [])
    assert message is not None
    assert "excludes device gpu-1-vgpu (a vGPU share) of the same claim" in message
    assert refusal(["gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1", "gpu-1"], []) is None


def test_a_profile_the_gpu_does_not_know_takes_the_whole_gpu() -> None:
    # a checkpoint written before the profile table changed: the held device blocks the whole GPU
    assert refusal(["gpu-0-mig-1g10gb-6"], ["gpu-0-mig-2g99gb-0"]) is not None
