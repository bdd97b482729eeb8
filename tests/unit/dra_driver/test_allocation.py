from __future__ import annotations

from decimal import Decimal

import pytest
from claim_models import POOL, claim, config, result, vgpu_result
from inventories import make_gpu, make_inventory

from dra_driver.allocation import (
    MigAction,
    PlacementKey,
    VgpuLimits,
    parse_quantity,
    plan_claim,
)
from dra_driver.config import SmLimitPolicy, VgpuConfig
from dra_driver.errors import ClaimError, ConfigError, PlacementTakenError
from dra_driver.model import Inventory
from dra_driver.names import DRIVER_NAME, Family, qualified

GiB = 1 << 30

H100 = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM"))


def plan(c: object, inventory: Inventory = H100, **kw: object):  # type: ignore[no-untyped-def]
    return plan_claim(c, driver=DRIVER_NAME, pool=POOL, inventory=inventory, **kw)  # type: ignore[arg-type]


def error_of(c: object, inventory: Inventory = H100, **kw: object) -> str:
    with pytest.raises((ClaimError, ConfigError, PlacementTakenError)) as info:
        plan(c, inventory, **kw)
    return str(info.value)


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("20Gi", 20 * GiB),
        ("1.5Gi", Decimal(3 * GiB // 2)),
        ("512Mi", 512 << 20),
        ("2G", 2 * 10**9),
        ("50", 50),
        ("500m", Decimal("0.5")),
        ("1e3", 1000),
        ("1E", 10**18),
        (7, 7),
    ],
)
def test_parse_quantity(text: object, value: object) -> None:
    assert parse_quantity(text) == value


@pytest.mark.parametrize("text", ["", "Gi", "20 GiB", "1.2.3", "-", True, None])
def test_parse_quantity_rejects(text: object) -> None:
    with pytest.raises(ValueError):
        parse_quantity(text)


def test_whole_gpu() -> None:
    c = claim(result("gpu-1"))
    p = plan(c)
    assert p.uid == c.metadata.uid and (p.namespace, p.name, p.pool) == ("ns", "claim", POOL)
    (d,) = p.devices
    assert (d.family, d.gpu_index, d.gpu_uuid, d.limits, d.mig) == (
        Family.GPU,
        1,
        H100.gpus[1].uuid,
        None,
        None,
    )
    assert p.vgpu is None and p.enable_mig_mode == ()


def test_vgpu_limits_come_from_consumed_capacity_only() -> None:
    r = vgpu_result(0, memory="20Gi", cores="50")
    # a config cannot raise a limit: there is no field for it, and the consumed capacity is what counts
    p = plan(claim(r, configs=[config("VgpuConfig", priority=0, smLimitPolicy="force", source="FromClass")]))
    (d,) = p.devices
    assert d.limits == VgpuLimits(memory_bytes=20 * GiB, cores=50)
    assert d.share_id == r.share_id
    assert p.vgpu == VgpuConfig(sm_limit_policy=SmLimitPolicy.FORCE, priority=0)


def test_vgpu_capacity_names_may_be_qualified() -> None:
    r = result(
        "gpu-0-vgpu",
        share_id="s1",
        consumed={qualified("memory"): "1Gi", qualified("cores"): "0", qualified("shares"): "1"},
    )
    assert plan(claim(r)).devices[0].limits == VgpuLimits(memory_bytes=GiB, cores=0)


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
def test_vgpu_bad_capacity(consumed: dict[str, str] | None, needle: str) -> None:
    assert needle in error_of(claim(result("gpu-0-vgpu", consumed=consumed)))


def test_results_of_other_drivers_are_ignored() -> None:
    p = plan(claim(result("nic-0", driver="net.example.com", pool="elsewhere"), result("gpu-0")))
    assert [d.device for d in p.devices] == ["gpu-0"]


def test_errors_about_the_allocation() -> None:
    assert "no allocation results for driver gpu.tessera.dev" in error_of(
        claim(result("nic-0", driver="net.example.com"))
    )
    assert "allocated from pool 'node-b', but this node's pool is 'node-a'" in error_of(
        claim(result("gpu-0"), result("gpu-1", pool="node-b"))
    )
    assert "claim is not allocated" in error_of(claim(result("gpu-0"), allocated=False))
    assert "this node has no GPU with index 7" in error_of(claim(result("gpu-7")))
    assert "'gpu-zero' is not one of" in error_of(claim(result("gpu-zero")))


def test_bad_opaque_config_fails_the_claim_even_if_unused() -> None:
    c = claim(result("gpu-0"), configs=[config("VgpuConfig", requests=["other"], prioity=0)])
    assert "opaque.parameters.prioity: unknown field in VgpuConfig" in error_of(c)


def test_other_drivers_configs_are_not_decoded() -> None:
    plan(claim(result("gpu-0"), configs=[config("Whatever", driver="net.example.com", x=1)]))


def test_vgpu_devices_of_one_claim_share_one_config() -> None:
    c = claim(
        vgpu_result(0, request="a"),
        vgpu_result(1, request="b"),
        configs=[config("VgpuConfig", requests=["a"], priority=0, source="FromClass")],
    )
    assert "VgpuConfig for request b differs from request a" in error_of(c)


def test_one_gpu_shared_twice_in_one_claim_is_rejected() -> None:
    c = claim(vgpu_result(0, request="a"), vgpu_result(0, request="b"))
    assert "allocated to two requests of one claim" in error_of(c)


def test_whole_gpu_or_vgpu_on_a_gpu_in_mig_mode() -> None:
    inv = make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True))
    assert "GPU 0 is in MIG mode" in error_of(claim(result("gpu-0")), inv)
    assert "GPU 0 is in MIG mode" in error_of(claim(vgpu_result(0)), inv)


def test_mig_on_hopper_with_mig_mode_off_enables_it() -> None:
    p = plan(claim(result("gpu-1-mig-3g40gb-4")))
    (d,) = p.devices
    assert d.mig is not None and d.mig.action is MigAction.CREATE
    assert d.mig.key == PlacementKey(H100.gpus[1].uuid, 9, 4)
    assert (d.mig.profile_name, d.mig.size) == ("3g.40gb", 4)
    assert p.enable_mig_mode == (H100.gpus[1].uuid,)
    assert p.mig_placements == (d.mig,)


def test_mig_on_ampere_with_mig_mode_off_needs_an_administrator() -> None:
    inv = make_inventory(make_gpu(0, "A100-SXM4-80GB"))
    assert "cannot switch it on without a reset" in error_of(claim(result("gpu-0-mig-1g10gb-0")), inv)


def test_mig_bad_placements() -> None:
    assert "3g.40gb cannot start at memory slice 2" in error_of(claim(result("gpu-0-mig-3g40gb-2")))
    assert "has no MIG profile 5g.50gb" in error_of(claim(result("gpu-0-mig-5g50gb-0")))
    l4 = make_inventory(make_gpu(0, "L4"))
    assert "has no MIG profile" in error_of(claim(result("gpu-0-mig-1g10gb-0")), l4)


ADMIN = make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True, instances=(("3g.40gb", 0),)))


def test_exact_admin_instance_is_used_as_a_static_device() -> None:
    p = plan(claim(result("gpu-0-mig-3g40gb-0")), ADMIN)
    (d,) = p.devices
    assert d.mig is not None and d.mig.action is MigAction.STATIC
    assert d.mig.instance == ADMIN.gpus[0].mig_instances[0]
    assert p.enable_mig_mode == ()


def test_placement_overlapping_an_admin_instance_is_taken() -> None:
    message = error_of(claim(result("gpu-0-mig-1g10gb-2")), ADMIN)
    assert "overlaps instance 3g.40gb@0" in message and "created by an administrator" in message


def test_placement_recorded_for_another_claim_is_taken() -> None:
    key = PlacementKey(ADMIN.gpus[0].uuid, 9, 0)
    message = error_of(claim(result("gpu-0-mig-3g40gb-0")), ADMIN, tessera_placements=frozenset({key}))
    assert "held by another prepared claim" in message
    free = PlacementKey(ADMIN.gpus[0].uuid, 9, 4)
    assert "held by another prepared claim" in error_of(
        claim(result("gpu-0-mig-3g40gb-4")), ADMIN, tessera_placements=frozenset({free})
    )


def test_own_recorded_instance_is_reused_when_rolling_forward() -> None:
    key = PlacementKey(ADMIN.gpus[0].uuid, 9, 0)
    p = plan(claim(result("gpu-0-mig-3g40gb-0")), ADMIN, own_placements=frozenset({key}))
    assert p.devices[0].mig is not None and p.devices[0].mig.action is MigAction.CREATE


def test_same_placement_twice_in_one_claim() -> None:
    c = claim(result("gpu-0-mig-1g10gb-0", request="a"), result("gpu-0-mig-1g10gb-0", request="b"))
    assert "allocated twice in one claim" in error_of(c)


def test_mixed_claim_keeps_result_order() -> None:
    c = claim(vgpu_result(0, request="v"), result("gpu-1-mig-1g10gb-3", request="m"))
    p = plan(c)
    assert [(d.request, d.family) for d in p.devices] == [("v", Family.VGPU), ("m", Family.MIG)]
    assert p.vgpu == VgpuConfig()
