from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.families import mig, parse_device_name
from dra_driver.core.families.base import AnyPlanned, NodeRecords
from dra_driver.core.families.mig import (
    MigAction,
    MigName,
    MigPlan,
    MigRecord,
    mig_device_class_name,
    mig_device_name,
)
from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.inventory import Placement
from dra_driver.vocabulary.names import GpuUUID
from tests.support.claim_models import claim, result
from tests.support.family_plans import H100, error_of, plan
from tests.support.inventories import make_gpu, make_inventory


def mig_plan(d: AnyPlanned) -> MigPlan:
    assert isinstance(d.spec, MigPlan)
    return d.spec


ADMIN = make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True, instances=(("3g.40gb", 0),)))


def test_on_hopper_with_mig_mode_off_it_is_switched_on() -> None:
    p = plan(claim(result("gpu-1-mig-3g40gb-4")))
    (d,) = p.devices
    m = mig_plan(d)
    assert m.action is MigAction.CREATE and m.enable_mig_mode
    assert m.placement == Placement(H100.gpus[1].uuid, 9, 4)
    assert (m.profile_name, m.size) == ("3g.40gb", 4)
    (record,) = mig.FAMILY.records(p.devices, NodeRecords())
    assert record == MigRecord("gpu-1-mig-3g40gb-4", m.placement, "3g.40gb", created_by_tessera=True)
    assert mig.FAMILY.placements((record,)) == (m.placement,)


def test_on_ampere_with_mig_mode_off_an_administrator_must_switch_it() -> None:
    inv = make_inventory(make_gpu(0, "A100-SXM4-80GB"))
    assert "cannot switch it on without a reset" in error_of(claim(result("gpu-0-mig-1g10gb-0")), inv)


def test_bad_placements() -> None:
    assert "3g.40gb cannot start at memory slice 2" in error_of(claim(result("gpu-0-mig-3g40gb-2")))
    assert "has no MIG profile 5g.50gb" in error_of(claim(result("gpu-0-mig-5g50gb-0")))
    l4 = make_inventory(make_gpu(0, "L4"))
    assert "has no MIG profile" in error_of(claim(result("gpu-0-mig-1g10gb-0")), l4)


def test_exact_admin_instance_is_used_as_a_static_device() -> None:
    p = plan(claim(result("gpu-0-mig-3g40gb-0")), ADMIN)
    m = mig_plan(p.devices[0])
    assert m.action is MigAction.STATIC and not m.enable_mig_mode
    assert m.instance == ADMIN.gpus[0].mig_instances[0]
    (record,) = mig.FAMILY.records(p.devices, NodeRecords())
    assert m.instance is not None and not record.created_by_tessera and record.uuid == m.instance.uuid
    assert mig.FAMILY.placements((record,)) == ()


def test_placement_overlapping_an_admin_instance_is_taken() -> None:
    message = error_of(claim(result("gpu-0-mig-1g10gb-2")), ADMIN)
    assert "overlaps instance 3g.40gb@0" in message and "created by an administrator" in message


def _record(placement: Placement) -> MigRecord:
    return MigRecord("gpu-0-mig-3g40gb-0", placement, "3g.40gb")


def test_placement_recorded_for_another_claim_is_taken() -> None:
    key = Placement(ADMIN.gpus[0].uuid, 9, 0)
    message = error_of(claim(result("gpu-0-mig-3g40gb-0")), ADMIN, others={mig.NAME: [_record(key)]})
    assert "held by another prepared claim" in message
    free = Placement(ADMIN.gpus[0].uuid, 9, 4)
    assert "held by another prepared claim" in error_of(
        claim(result("gpu-0-mig-3g40gb-4")), ADMIN, others={mig.NAME: [_record(free)]}
    )


def test_own_recorded_instance_is_reused_when_rolling_forward() -> None:
    key = Placement(ADMIN.gpus[0].uuid, 9, 0)
    p = plan(claim(result("gpu-0-mig-3g40gb-0")), ADMIN, own={mig.NAME: [_record(key)]})
    assert mig_plan(p.devices[0]).action is MigAction.CREATE


def test_same_placement_twice_in_one_claim() -> None:
    c = claim(result("gpu-0-mig-1g10gb-0", request="a"), result("gpu-0-mig-1g10gb-0", request="b"))
    assert "allocated twice in one claim" in error_of(c)


def test_record_round_trip_and_strict_decoding() -> None:
    r = MigRecord("gpu-0-mig-1g10gb-3", Placement(GpuUUID("GPU-0"), 19, 3), "1g.10gb", True, 5, 0, "MIG-x")
    assert mig.FAMILY.decode_record(mig.FAMILY.encode_record(r)) == r
    data = mig.FAMILY.encode_record(r)
    for key, bad in (("start", "3"), ("createdByTessera", 1), ("giID", True), ("uuid", 7), ("device", None)):
        with pytest.raises(ValueError):
            mig.FAMILY.decode_record({**data, key: bad})


def test_names() -> None:
    assert mig_device_name(2, "1g.10gb+me", 6) == "gpu-2-mig-1g10gb-me-6"
    assert mig_device_class_name("1g.10gb+me") == "mig-1g.10gb-me.gpu.tessera.dev"
    parsed = parse_device_name("gpu-2-mig-1g10gb-me-6")
    assert parsed.family is mig.FAMILY and parsed.index == 2 and parsed.detail == MigName("1g.10gb+me", 6)
    for bad in ("gpu-2-mig-1g10gb", "gpu-2-mig-1g.10gb-0", "gpu-2-mig-1g10gb-10"):
        with pytest.raises(InvalidNameError):
            parse_device_name(bad)


@given(
    index=st.integers(0, 9999),
    g=st.integers(1, 9),
    gb=st.integers(1, 999),
    me=st.booleans(),
    start=st.integers(0, 9),
)
def test_name_round_trip(index: int, g: int, gb: int, me: bool, start: int) -> None:
    profile = f"{g}g.{gb}gb" + ("+me" if me else "")
    parsed = parse_device_name(mig_device_name(index, profile, start))
    assert (parsed.family, parsed.index, parsed.detail) == (mig.FAMILY, index, MigName(profile, start))
