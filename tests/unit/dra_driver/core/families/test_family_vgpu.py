from __future__ import annotations

import pytest

from dra_driver.core.allocation import LibrarySettings
from dra_driver.core.config_schema import SmLimitPolicy
from dra_driver.core.families import vgpu
from dra_driver.core.families.base import NodeRecords
from dra_driver.core.families.capacity import SharedLimits
from dra_driver.core.families.vgpu import GpuShare, VgpuConfig
from dra_driver.libtessera.limits_file import LibraryLimits
from dra_driver.vocabulary.names import GpuUUID, qualified
from tests.support.claim_models import claim, config, result, vgpu_result
from tests.support.family_plans import H100, error_of, plan
from tests.support.inventories import make_gpu, make_inventory

GiB = 1 << 30


def test_limits_come_from_consumed_capacity_only() -> None:
    r = vgpu_result(0, memory="20Gi", cores="50")
    # a config cannot raise a limit: there is no field for it, and the consumed capacity is what counts
    p = plan(claim(r, configs=[config("VgpuConfig", priority=0, smLimitPolicy="force", source="FromClass")]))
    (d,) = p.devices
    assert d.spec == SharedLimits(memory_bytes=20 * GiB, cores=50)
    assert d.share_id == r.share_id
    assert d.config == VgpuConfig(sm_limit_policy=SmLimitPolicy.FORCE, priority=0)
    assert p.library == LibrarySettings(policy="force", log_level=1)
    assert p.limits() == (
        LibraryLimits(
            gpu_index=0,
            gpu_uuid=H100.gpus[0].uuid,
            memory_bytes=20 * GiB,
            cores=50,
            priority=0,
            time_sliced=True,
            policy="force",
            log_level=1,
        ),
    )


def test_capacity_names_may_be_qualified() -> None:
    r = result(
        "gpu-0-vgpu",
        share_id="s1",
        consumed={qualified("memory"): "1Gi", qualified("cores"): "0", qualified("shares"): "1"},
    )
    assert plan(claim(r)).devices[0].spec == SharedLimits(memory_bytes=GiB, cores=0)


@pytest.mark.parametrize(
    ("consumed", "needle"),
    [
        (None, "vgpu device gpu-0-vgpu (request gpu) has no consumedCapacity"),
        ({"cores": "10"}, "consumedCapacity has no 'memory'"),
        ({"memory": "1Gi"}, "consumedCapacity has no 'cores'"),
        ({"memory": "lots", "cores": "1"}, "consumedCapacity memory 'lots' is not a quantity"),
        ({"memory": "1Gi", "cores": "1.5"}, "consumedCapacity cores '1.5' is not a whole number"),
        (
            {"memory": "100Gi", "cores": "1"},
            "consumed memory 107374182400 bytes is outside the device's policy",
        ),
        ({"memory": "1000000", "cores": "1"}, "outside the device's policy"),  # not a whole MiB
        ({"memory": "0", "cores": "1"}, "outside the device's policy"),
        ({"memory": "1Gi", "cores": "101"}, "consumed cores 101 is outside the device's policy (0…100)"),
    ],
)
def test_bad_capacity(consumed: dict[str, str] | None, needle: str) -> None:
    assert needle in error_of(claim(result("gpu-0-vgpu", consumed=consumed)))


def test_devices_of_one_claim_share_one_config() -> None:
    c = claim(
        vgpu_result(0, request="a"),
        vgpu_result(1, request="b"),
        configs=[config("VgpuConfig", requests=["a"], priority=0, source="FromClass")],
    )
    assert "VgpuConfig for request b differs from request a" in error_of(c)


def test_one_gpu_shared_twice_in_one_claim_is_rejected() -> None:
    c = claim(vgpu_result(0, request="a"), vgpu_result(0, request="b"))
    assert "allocated to two requests of one claim" in error_of(c)


def test_not_on_a_gpu_in_mig_mode() -> None:
    inv = make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True))
    assert "GPU 0 is in MIG mode, so it cannot be used as a vGPU" in error_of(claim(vgpu_result(0)), inv)


def test_slots_lowest_free_kept_when_prepared_again() -> None:
    p = plan(claim(vgpu_result(0, cores="30"), vgpu_result(1, request="b", cores="0")))
    g0, g1 = H100.gpus[0].uuid, H100.gpus[1].uuid
    taken = NodeRecords(others=(GpuShare(g0, 1, 50), GpuShare(g0, 3, 10), GpuShare(g1, 2, 0)))
    shares = vgpu.FAMILY.records(p.devices, taken)
    assert shares == (GpuShare(g0, 2, 30), GpuShare(g1, 1, 0))
    again = vgpu.FAMILY.records(p.devices, NodeRecords(claim=shares, others=taken.others))
    assert again == shares
    assert vgpu.FAMILY.slots(shares) == {g0: 2, g1: 1}


def test_disabled_limit_reserves_nothing_and_priority_zero_is_high() -> None:
    c = claim(
        vgpu_result(0, cores="40"),
        configs=[config("VgpuConfig", smLimitPolicy="disable", source="FromClass")],
    )
    (share,) = vgpu.FAMILY.records(plan(c).devices, NodeRecords())
    assert share == GpuShare(H100.gpus[0].uuid, 1, 0, high_priority=False)
    c = claim(vgpu_result(0, cores="40"), configs=[config("VgpuConfig", priority=0, source="FromClass")])
    (share,) = vgpu.FAMILY.records(plan(c).devices, NodeRecords())
    assert share == GpuShare(H100.gpus[0].uuid, 1, 40, high_priority=True)


def test_record_round_trip_and_strict_decoding() -> None:
    share = GpuShare(GpuUUID("GPU-x"), 7, 25, high_priority=True)
    assert vgpu.FAMILY.decode_record(vgpu.FAMILY.encode_record(share)) == share
    for bad in (
        {"gpuUUID": "GPU-x", "slot": 0, "cores": 1, "highPriority": False},
        {"gpuUUID": "GPU-x", "slot": 1, "cores": 101, "highPriority": False},
        {"gpuUUID": "GPU-x", "slot": True, "cores": 1, "highPriority": False},
        {"gpuUUID": 5, "slot": 1, "cores": 1, "highPriority": False},
    ):
        with pytest.raises(ValueError):
            vgpu.FAMILY.decode_record(bad)


@pytest.mark.parametrize(
    ("cores", "limit", "ceiling"),
    [("30", 100, 100), ("30", 50, 50), ("30", 30, 0), ("30", 20, 0), ("30", 0, 0), ("0", 80, 0)],
)
def test_a_ceiling_is_the_core_limit_above_the_guarantee(cores: str, limit: int, ceiling: int) -> None:
    c = claim(vgpu_result(0, cores=cores), configs=[config("VgpuConfig", coresLimit=limit)])
    p = plan(c)
    (lim,) = p.limits()
    assert (lim.cores, lim.ceiling) == (int(cores), ceiling)
    (share,) = vgpu.FAMILY.records(p.devices, NodeRecords())
    assert isinstance(share, GpuShare)
    assert (share.cores, share.ceiling) == (int(cores), ceiling)
    limits = vgpu.FAMILY.status(p.devices[0], None)["limits"]
    # describe shows the guarantee, and the ceiling only where the claim may burst
    assert limits["cores"] == int(cores)
    assert limits.get("coresLimit") == (ceiling or None)


def test_a_class_makes_burst_the_default_and_a_claim_may_set_its_own() -> None:
    cls = config("VgpuConfig", coresLimit=100, source="FromClass")
    (lim,) = plan(claim(vgpu_result(0, cores="30"), configs=[cls])).limits()
    assert lim.ceiling == 100
    own = config("VgpuConfig", coresLimit=60)
    (lim,) = plan(claim(vgpu_result(0, cores="30"), configs=[cls, own])).limits()
    assert lim.ceiling == 60


def test_records_with_a_ceiling_round_trip_and_old_records_have_none() -> None:
    share = GpuShare(GpuUUID("GPU-x"), 2, 30, ceiling=90)
    assert vgpu.FAMILY.encode_record(share)["coresLimit"] == 90
    assert vgpu.FAMILY.decode_record(vgpu.FAMILY.encode_record(share)) == share
    old = {"gpuUUID": "GPU-x", "slot": 2, "cores": 30, "highPriority": False}
    assert vgpu.FAMILY.decode_record(old) == GpuShare(GpuUUID("GPU-x"), 2, 30)
    assert "coresLimit" not in vgpu.FAMILY.encode_record(GpuShare(GpuUUID("GPU-x"), 2, 30))
    with pytest.raises(ValueError):
        vgpu.FAMILY.decode_record({**old, "coresLimit": 101})
