"""memoryOversubscription: the node setting, the vgpu device's virtualMemory, and the opt-in a claim needs
to consume it (dra_driver/core/families/oversubscription.py, through the slices and plan_claim)."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

import pytest

from dra_driver.core.allocation import plan_claim
from dra_driver.core.families import vgpu
from dra_driver.core.families.base import FamilySettings
from dra_driver.core.families.capacity import SharedLimits
from dra_driver.core.families.oversubscription import OVERSUBSCRIPTION, virtual_bytes
from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.errors import ClaimError, ConfigError
from dra_driver.vocabulary.inventory import Gpu, Inventory
from dra_driver.vocabulary.names import DRIVER_NAME, Family
from tests.support.claim_models import POOL, claim, config, result
from tests.support.family_plans import H100
from tests.support.inventories import make_gpu, make_inventory
from tests.support.slice_checks import check_slices, devices

MiB, GiB = 1 << 20, 1 << 30
NODE = "node-a"
H100_MIB = 81559  # an H100 80GB's memory as NVML reports it, in MiB (the vgpu device's `memory`)


def vgpu_device(settings: NodeSettings) -> dict[str, Any]:
    slices = build_slices(make_inventory(make_gpu(0, "H100-80GB-SXM")), settings)
    check_slices(slices, NODE)
    return next(d for d in devices(slices) if d["name"] == "gpu-0-vgpu")


def node(ratio: object) -> FamilySettings:
    return family_settings(memoryOversubscription=ratio)


def test_ratio_one_publishes_exactly_the_slices_of_a_node_without_the_setting() -> None:
    inv = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(2)))
    plain = build_slices(inv, NodeSettings(node_name=NODE))
    assert build_slices(inv, NodeSettings(node_name=NODE, family=node(1))) == plain
    assert build_slices(inv, NodeSettings(node_name=NODE, family=node(1.0))) == plain
    assert "virtualMemory" not in vgpu_device(NodeSettings(node_name=NODE))["capacity"]


def test_a_ratio_publishes_the_rest_as_virtual_memory_and_keeps_memory_the_gpus() -> None:
    cap = vgpu_device(NodeSettings(node_name=NODE, family=node(2)))["capacity"]
    # `memory` is still what the device holds: claims that did not opt in are placed against it alone
    assert cap["memory"]["value"] == f"{H100_MIB}Mi"
    assert cap["virtualMemory"] == {
        "value": f"{H100_MIB}Mi",
        "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": f"{H100_MIB}Mi", "step": "1Mi"}},
    }
    half = vgpu_device(NodeSettings(node_name=NODE, family=node(1.5)))["capacity"]["virtualMemory"]
    assert half["value"] == f"{H100_MIB // 2}Mi"  # rounded down to the step


def test_mps_devices_publish_no_virtual_memory() -> None:
    slices = build_slices(
        make_inventory(make_gpu(0, "H100-80GB-SXM")), NodeSettings(node_name=NODE, family=node(3))
    )
    mps_device = next(d for d in devices(slices) if d["name"] == "gpu-0-mps")
    assert "virtualMemory" not in mps_device["capacity"]


@pytest.mark.parametrize(
    ("raw", "needle"),
    [
        (0.5, "memoryOversubscription: 0.5 is out of range; use 1..8"),
        (0, "memoryOversubscription: 0 is out of range"),
        (9, "memoryOversubscription: 9 is out of range"),
        (True, "memoryOversubscription: expected a number like 1.5, got True"),
        ("2", "memoryOversubscription: expected a number"),
        (float("nan"), "memoryOversubscription: expected a number"),
    ],
)
def test_bad_ratios_are_refused_naming_the_field(raw: object, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        NodeSettings.from_mapping(
            {"apiVersion": "resource.tessera.dev/v1", "kind": "NodeSettings", "memoryOversubscription": raw},
            node_name=NODE,
        )


def test_the_setting_is_read_from_the_file() -> None:
    s = NodeSettings.from_mapping(
        {"apiVersion": "resource.tessera.dev/v1", "kind": "NodeSettings", "memoryOversubscription": 2.5},
        node_name=NODE,
    )
    assert s.setting(OVERSUBSCRIPTION) == 2.5
    assert virtual_bytes(H100.gpus[0], 2.5) == (H100_MIB * 3 // 2) * MiB


def shared(memory: str, virtual: str | None = None) -> Any:
    consumed = {"memory": memory, "cores": "0", "shares": "1"}
    if virtual is not None:
        consumed["virtualMemory"] = virtual
    return result("gpu-0-vgpu", share_id="s1", consumed=consumed)


OPT_IN = config("VgpuConfig", memoryOversubscription="enabled", source="FromClass")


def planned(c: Any, settings: FamilySettings) -> Any:
    return plan_claim(c, driver=DRIVER_NAME, pool=POOL, inventory=H100, settings=settings)


def test_an_opted_in_claim_is_limited_to_memory_plus_virtual_and_holds_memory_on_the_device() -> None:
    p = planned(claim(shared("40Gi", "60Gi"), configs=[OPT_IN]), node(2))
    (d,) = p.devices
    assert d.spec == SharedLimits(memory_bytes=40 * GiB, cores=0, virtual_bytes=60 * GiB)
    (lim,) = p.limits()
    assert (lim.memory_bytes, lim.resident_bytes) == (100 * GiB, 40 * GiB)
    assert vgpu.FAMILY.status(d, None)["limits"] == {
        "memory": "40960Mi",
        "cores": 0,
        "virtualMemory": "61440Mi",
    }


def test_a_claim_that_did_not_opt_in_keeps_every_byte_on_the_device() -> None:
    p = planned(claim(shared("40Gi")), node(2))
    (lim,) = p.limits()
    assert (lim.memory_bytes, lim.resident_bytes) == (40 * GiB, None)
    assert "virtualMemory" not in vgpu.FAMILY.status(p.devices[0], None)["limits"]


def test_virtual_memory_without_the_opt_in_is_refused() -> None:
    with pytest.raises(ClaimError, match="consumed virtualMemory 1024Mi without opting in; set VgpuConfig"):
        planned(claim(shared("40Gi", "1Gi")), node(2))


def test_an_opt_in_on_a_node_without_oversubscription_is_refused_naming_the_setting() -> None:
    with pytest.raises(
        ConfigError, match="memoryOversubscription: enabled, but this node offers no host-backed"
    ):
        planned(claim(shared("40Gi"), configs=[OPT_IN]), node(1))


@pytest.mark.parametrize(
    ("virtual", "settings"),
    [("81560Mi", node(2)), ("1Gi", node(1)), ("1000000", node(2)), ("-1Gi", node(2))],
)
def test_virtual_memory_outside_what_the_node_published_is_refused(
    virtual: str, settings: FamilySettings
) -> None:
    with pytest.raises(ClaimError, match=r"virtualMemory .* is outside the device's policy"):
        planned(claim(shared("1Gi", virtual), configs=[OPT_IN]), settings)


# ---- what the host can back (check_host_backing, through NodeSettings.check_fits) ----------------------


def hosted(*gpus: Gpu, host_gib: int | None) -> Inventory:
    return replace(make_inventory(*gpus), host_memory_bytes=None if host_gib is None else host_gib * GiB)


def h100s(n: int) -> tuple[Gpu, ...]:
    return tuple(make_gpu(i, "H100-80GB-SXM") for i in range(n))


def test_a_ratio_the_host_memory_backs_is_accepted_up_to_three_quarters_of_it() -> None:
    two = 2 * H100_MIB * MiB  # what ratio 2 publishes on two H100s
    needed_gib = -(-two * 4 // 3) // GiB + 1  # the least whole GiB whose three quarters hold it
    NodeSettings(node_name=NODE, family=node(2)).check_fits(hosted(*h100s(2), host_gib=needed_gib))
    with pytest.raises(ConfigError, match="memoryOversubscription: 2 publishes"):
        NodeSettings(node_name=NODE, family=node(2)).check_fits(hosted(*h100s(2), host_gib=needed_gib - 1))


def test_a_ratio_beyond_the_host_memory_is_refused_naming_the_field_and_the_highest_ratio_it_backs() -> None:
    settings = NodeSettings(node_name=NODE, family=node(2))
    with pytest.raises(ConfigError) as e:
        settings.check_fits(hosted(*h100s(8), host_gib=512))
    said = str(e.value)
    assert said.startswith("memoryOversubscription: 2 publishes 637.2Gi of host-backed virtualMemory")
    assert "MemTotal 512Gi, of which at most 3/4 (384Gi)" in said
    # 1 + 384Gi / (8 x 81559Mi) = 1.6027...: the highest ratio it backs, to two places, rounded down
    assert "set memoryOversubscription to at most 1.6 in this node group's settings" in said
    assert "nodeGroups[].memoryOversubscription" in said
    NodeSettings(node_name=NODE, family=node(1.6)).check_fits(hosted(*h100s(8), host_gib=512))
    with pytest.raises(ConfigError):
        NodeSettings(node_name=NODE, family=node(1.61)).check_fits(hosted(*h100s(8), host_gib=512))


def test_unknown_host_memory_backs_nothing_but_ratio_one_needs_none() -> None:
    with pytest.raises(ConfigError, match=r"MemTotal in /proc/meminfo\) could not be read; set memoryOver"):
        NodeSettings(node_name=NODE, family=node(1.5)).check_fits(hosted(*h100s(1), host_gib=None))
    NodeSettings(node_name=NODE, family=node(1)).check_fits(hosted(*h100s(1), host_gib=None))
    NodeSettings(node_name=NODE).check_fits(hosted(*h100s(1), host_gib=None))


def test_only_gpus_that_may_offer_vgpu_need_backing_and_only_where_the_node_offers_vgpu() -> None:
    # an A100 in MIG mode (it cannot leave it without a reset) publishes no vgpu device, so no virtualMemory
    mig_a100 = make_gpu(1, "A100-SXM4-40GB", mig_enabled=True)
    host = -(-H100_MIB * MiB * 4 // 3) // GiB + 1  # backs one H100 at ratio 2, not two
    settings = NodeSettings(node_name=NODE, family=node(2))
    settings.check_fits(hosted(make_gpu(0, "H100-80GB-SXM"), mig_a100, host_gib=host))
    with pytest.raises(ConfigError):
        settings.check_fits(hosted(*h100s(2), host_gib=host))
    no_vgpu = NodeSettings(
        node_name=NODE, family=node(2), families=frozenset({Family("gpu"), Family("mig"), Family("mps")})
    )
    no_vgpu.check_fits(hosted(*h100s(2), host_gib=1))
