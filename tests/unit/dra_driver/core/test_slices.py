from __future__ import annotations

from collections import Counter as Count
from itertools import combinations
from typing import Any

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.backends.sim_node import AdminInstance, SimGpu, SimulatedNode
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core import families as registry
from dra_driver.core.device_order import DeviceOrder
from dra_driver.core.devices import gpu_devices
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, mps, parse_device_name, vgpu
from dra_driver.core.families.base import Json
from dra_driver.core.families.capacity import MAX_SHARES
from dra_driver.core.families.mig import MigName
from dra_driver.core.families.published import attribute_version, pci_bus_id
from dra_driver.core.profiles import PRODUCTS, product
from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.core.slices import build_slices, device_names, pack_devices
from dra_driver.vocabulary.errors import MigError
from dra_driver.vocabulary.inventory import Gpu, Inventory, Placement
from dra_driver.vocabulary.names import Family, GpuUUID, counter_set_name, resource_slice_name
from tests.support.inventories import make_gpu, make_inventory
from tests.support.slice_checks import check_slices, consumption, counter_sets, devices, fits, quantity

NODE = "node-a"
ALL = NodeSettings(node_name=NODE)


def families_of(names: list[str], index: int) -> Count[Family]:
    return Count(parse_device_name(n).family.name for n in names if parse_device_name(n).index == index)


def by_name(slices: list[dict[str, Any]]) -> dict[str, dict[str, Any]]:
    return {str(d["name"]): d for d in devices(slices)}


def attr(device: dict[str, Any], name: str) -> object:
    value = device["attributes"][f"gpu.tessera.dev/{name}"]
    return next(iter(value.values()))


def test_eight_h100s_offer_everything_in_five_slices() -> None:
    inv = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(8)))
    slices = build_slices(inv, ALL)
    check_slices(slices, NODE)
    assert len(slices) == 5 and "sharedCounters" in slices[0]["spec"]
    names = device_names(slices)
    for i in range(8):
        assert families_of(names, i) == {whole.NAME: 1, vgpu.NAME: 1, mps.NAME: 1, mig.NAME: 25}
    assert sorted(counter_sets(slices)) == sorted(counter_set_name(i) for i in range(8))


def test_vgpu_device_is_multi_allocatable_with_policies() -> None:
    slices = build_slices(
        make_inventory(make_gpu(0, "H100-80GB-SXM")),
        NodeSettings(node_name=NODE, family=family_settings(vgpuShares=7)),
    )
    vgpu = by_name(slices)["gpu-0-vgpu"]
    assert vgpu["allowMultipleAllocations"] is True
    cap = vgpu["capacity"]
    assert isinstance(cap, dict)
    memory = cap["memory"]
    assert memory["value"] == "81559Mi" and memory["requestPolicy"]["validRange"] == {
        "min": "1Mi",
        "max": "81559Mi",
        "step": "1Mi",
    }
    assert cap["cores"]["requestPolicy"] == {
        "default": "0",
        "validRange": {"min": "0", "max": "100", "step": "1"},
    }
    assert cap["shares"] == {
        "value": "7",
        "requestPolicy": {"default": "1", "validValues": ["1"]},
    }
    assert attr(vgpu, "type") == "vgpu" and attr(vgpu, "parentUUID") == attr(vgpu, "uuid")


def test_attributes_of_the_whole_gpu() -> None:
    gpu = by_name(build_slices(make_inventory(make_gpu(3, "A100-SXM4-40GB")), ALL))["gpu-3"]
    assert attr(gpu, "type") == "gpu" and attr(gpu, "productName") == "NVIDIA A100-SXM4-40GB"
    assert attr(gpu, "cudaComputeCapability") == "8.0.0" and attr(gpu, "driverVersion") == "535.104.5"
    assert attr(gpu, "cudaDriverVersion") == "12.2.0" and attr(gpu, "architecture") == "Ampere"
    assert gpu["attributes"]["resource.kubernetes.io/pciBusID"] == {"string": "0000:13:00.0"}
    assert gpu["capacity"]["memory"] == {"value": "40960Mi"}


def test_ampere_mig_off_offers_gpu_and_vgpu_only() -> None:
    names = device_names(build_slices(make_inventory(make_gpu(0, "A100-SXM4-40GB")), ALL))
    assert families_of(names, 0) == {whole.NAME: 1, vgpu.NAME: 1, mps.NAME: 1}


def test_ampere_mig_on_offers_mig_only() -> None:
    names = device_names(build_slices(make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True)), ALL))
    assert families_of(names, 0) == {mig.NAME: 25}


def test_admin_instances_are_static_and_block_overlapping_placements() -> None:
    gpu = make_gpu(0, "H100-80GB-SXM", mig_enabled=True, instances=(("3g.40gb", 0), ("1g.10gb+me", 4)))
    slices = build_slices(make_inventory(gpu), ALL)
    check_slices(slices, NODE)
    devs = by_name(slices)
    assert "gpu-0" not in devs and "gpu-0-vgpu" not in devs  # a partitioned GPU cannot be whole
    static = devs["gpu-0-mig-3g40gb-0"]
    assert attr(static, "uuid") == gpu.mig_instances[0].uuid and attr(static, "migStatic") is True
    assert "consumesCounters" not in static
    mig = sorted(n for n in devs if "-mig-" in n)
    # Free slices 5, 6, 7: 1g.10gb at 5 and 6, 1g.20gb at 6; no second +me (one OFA engine, max 1).
    assert mig == sorted(
        [
            "gpu-0-mig-3g40gb-0",
            "gpu-0-mig-1g10gb-me-4",
            "gpu-0-mig-1g10gb-5",
            "gpu-0-mig-1g10gb-6",
            "gpu-0-mig-1g20gb-6",
        ]
    )


def test_instances_tessera_owns_stay_ordinary_placements() -> None:
    gpu = make_gpu(0, "H100-80GB-SXM", mig_enabled=True, instances=(("2g.20gb", 2),))
    owned = frozenset({Placement(gpu.uuid, gpu.mig_instances[0].profile_id, 2)})
    slices = build_slices(make_inventory(gpu), ALL, owned_placements=owned)
    devs = by_name(slices)
    assert families_of(list(devs), 0) == {whole.NAME: 1, vgpu.NAME: 1, mps.NAME: 1, mig.NAME: 25}
    assert "consumesCounters" in devs["gpu-0-mig-2g20gb-2"]


def full_model(
    inv: Inventory, settings_: NodeSettings, owned: frozenset[Placement]
) -> dict[int, tuple[Json | None, tuple[Json, ...]]]:
    """Per GPU index: the counter set and devices the families describe, before the slices reduce them."""
    out = {}
    for g in inv.gpus:
        group = gpu_devices(g, inv, settings_, owned=owned)
        out[g.index] = (group.counter_set, group.devices)
    return out


def assert_same_exclusions(
    inv: Inventory,
    settings_: NodeSettings,
    slices: list[dict[str, Any]],
    *,
    owned: frozenset[Placement] = frozenset(),
    up_to: int = 3,
) -> None:
    """Every group of up to `up_to` devices of one GPU fits the published counters exactly when it fits
    the families' full counter model: the reduction changed what is published, not what can be allocated."""
    published = by_name(slices)
    sets = counter_sets(slices)
    for index, (full_set, full_devices) in full_model(inv, settings_, owned).items():
        if full_set is None:
            continue
        name = str(full_set["name"])
        full_limits = {k: quantity(v["value"]) for k, v in full_set["counters"].items()}
        mine = [d for d in full_devices if str(d["name"]) in published]
        for size in range(2, up_to + 1):
            for group in combinations(mine, size):
                shown = [published[str(d["name"])] for d in group]
                assert fits(group, name, full_limits) == fits(shown, name, sets.get(name, {})), (
                    index,
                    [d["name"] for d in group],
                )


def test_placements_keep_their_memory_slices_and_gpu_wide_devices_hold_them_all() -> None:
    inv = make_inventory(make_gpu(0, "H100-80GB-PCIE"), make_gpu(1, "L4"))
    slices = build_slices(inv, ALL)
    sets = counter_sets(slices)
    gpu0 = counter_set_name(0)
    assert sorted(sets[gpu0]) == [f"memory-slice-{k}" for k in range(7)] + ["ofa-engines"]
    for name, d in by_name(slices).items():
        parsed = parse_device_name(name)
        consumed = consumption(d, counter_set_name(parsed.index))
        if parsed.index == 1:
            # L4: whole, vgpu and MPS exclude each other through one counter
            assert len(consumed) == 1 and len(sets[counter_set_name(1)]) == 1
        elif parsed.family.name in (whole.NAME, vgpu.NAME, mps.NAME):
            assert set(consumed) == {f"memory-slice-{k}" for k in range(7)}
        else:
            assert isinstance(parsed.detail, MigName)
            profile, start = parsed.detail.profile, parsed.detail.start
            size = {"1g": 1, "2g": 2, "3g": 4, "4g": 4, "7g": 8}[profile[:2]]
            if profile == "1g.20gb":
                size = 2
            covered = {f"memory-slice-{k}" for k in range(start, start + size)} - {"memory-slice-7"}
            assert {k for k in consumed if k.startswith("memory-slice-")} == covered
            assert ("ofa-engines" in consumed) == profile.endswith("+me")
    assert_same_exclusions(inv, ALL, slices)


def test_family_settings() -> None:
    inv = make_inventory(make_gpu(0, "H100-80GB-SXM"))
    mig_only = NodeSettings(node_name=NODE, families=frozenset({mig.NAME}))
    assert families_of(device_names(build_slices(inv, mig_only)), 0) == {mig.NAME: 25}
    whole_only = NodeSettings(node_name=NODE, families=frozenset({whole.NAME}))
    assert device_names(build_slices(inv, whole_only)) == ["gpu-0"]
    assert build_slices(inv, NodeSettings(node_name=NODE, families=frozenset())) == []


def profile_of(name: str) -> str | None:
    detail = parse_device_name(name).detail
    return detail.profile if isinstance(detail, MigName) else None


def test_mig_profiles_thin_the_published_placements() -> None:
    inv = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(8)))
    fewer = NodeSettings(
        node_name=NODE, family=family_settings(migProfiles=["1g.10gb", "3g.40gb", "7g.80gb", "1g.5gb"])
    )
    slices = build_slices(inv, fewer)
    check_slices(slices, NODE)
    names = device_names(slices)
    assert len(slices) == 3 and len(names) == 8 * (3 + 7 + 2 + 1)
    assert {profile_of(n) for n in names} == {None, "1g.10gb", "3g.40gb", "7g.80gb"}
    assert sorted(counter_sets(slices)) == sorted(counter_set_name(i) for i in range(8))


def test_mig_profiles_keep_an_administrators_instances() -> None:
    inv = make_inventory(
        make_gpu(0, "H100-80GB-SXM", mig_enabled=True, instances=(("2g.20gb", 0),)),
        make_gpu(1, "H100-80GB-SXM"),
    )
    mig_only = NodeSettings(
        node_name=NODE, families=frozenset({mig.NAME}), family=family_settings(migProfiles=["7g.80gb"])
    )
    slices = build_slices(inv, mig_only)
    check_slices(slices, NODE)
    # GPU 0: its 7g cannot be placed beside the admin's 2g, and the 2g (static) stays published
    assert sorted(device_names(slices)) == ["gpu-0-mig-2g20gb-0", "gpu-1-mig-7g80gb-0"]


def test_counter_sets_that_cannot_bind_are_left_out() -> None:
    inv = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(8)))
    vgpu_only = build_slices(inv, NodeSettings(node_name=NODE, families=frozenset({vgpu.NAME})))
    check_slices(vgpu_only, NODE)
    assert counter_sets(vgpu_only) == {} and len(vgpu_only) == 1
    assert all("consumesCounters" not in d for d in devices(vgpu_only))
    # seven 1g.10gb placements never overlap and fit the GPU's engines and SMs together: nothing to count
    one_g = NodeSettings(
        node_name=NODE, families=frozenset({mig.NAME}), family=family_settings(migProfiles=["1g.10gb"])
    )
    assert counter_sets(build_slices(inv, one_g)) == {}
    # 1g.10gb and 3g.40gb overlap: the counters stay, on every device of the GPU
    overlapping = NodeSettings(
        node_name=NODE,
        families=frozenset({mig.NAME}),
        family=family_settings(migProfiles=["1g.10gb", "3g.40gb"]),
    )
    slices = build_slices(inv, overlapping)
    assert sorted(counter_sets(slices)) == sorted(counter_set_name(i) for i in range(8))
    assert all(len(d["consumesCounters"]) == 1 for d in devices(slices))
    # whole GPU and vgpu exclude each other through the counters
    whole_and_vgpu = NodeSettings(node_name=NODE, families=frozenset({whole.NAME, vgpu.NAME}))
    assert len(counter_sets(build_slices(inv, whole_and_vgpu))) == 8


def test_degraded_mode_is_whole_gpus_without_counters() -> None:
    inv = make_inventory(
        make_gpu(0, "H100-80GB-SXM"),
        make_gpu(1, "A100-SXM4-80GB", mig_enabled=True, instances=(("7g.80gb", 0),)),
    )
    slices = build_slices(inv, ALL, degraded=True)
    check_slices(slices, NODE)
    assert len(slices) == 1 and "sharedCounters" not in slices[0]["spec"]
    assert sorted(device_names(slices)) == ["gpu-0", "gpu-1-mig-7g80gb-0"]
    assert all("consumesCounters" not in d and "allowMultipleAllocations" not in d for d in devices(slices))


def test_every_device_of_an_unhealthy_gpu_is_tainted_and_the_rest_are_not() -> None:
    inv = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM", healthy=False))
    slices = build_slices(inv, ALL)
    check_slices(slices, NODE)
    found = by_name(slices)
    sick = [d for name, d in found.items() if parse_device_name(name).index == 1]
    assert len(sick) == 28  # whole, vgpu, MPS and 25 MIG placements
    assert all(
        d["taints"] == [{"key": "gpu.tessera.dev/unhealthy", "value": "reported", "effect": "NoSchedule"}]
        for d in sick
    )
    assert not any("taints" in d for name, d in found.items() if parse_device_name(name).index == 0)


def test_given_taints_are_used_and_withdrawn_where_the_api_cannot_keep_them() -> None:
    inv = make_inventory(make_gpu(0, "L4"), make_gpu(1, "L4"))
    lost = {"key": "gpu.tessera.dev/unhealthy", "value": "lost", "effect": "NoExecute", "timeAdded": "x"}
    taints = {inv.gpus[0].uuid: (lost,)}
    assert by_name(build_slices(inv, ALL, taints=taints))["gpu-0-vgpu"]["taints"] == [lost]
    old_cluster = build_slices(inv, ALL, taints=taints, taints_supported=False)
    assert device_names(old_cluster) == ["gpu-1-vgpu", "gpu-1-mps", "gpu-1"]


def test_many_gpus_need_several_counter_slices() -> None:
    inv = make_inventory(*(make_gpu(i, "H200-141GB") for i in range(12)))
    slices = build_slices(inv, ALL, generation=7)
    check_slices(slices, NODE)
    counter_slices = [s for s in slices if "sharedCounters" in s["spec"]]
    assert [len(s["spec"]["sharedCounters"]) for s in counter_slices] == [8, 4]
    assert {s["spec"]["pool"]["generation"] for s in slices} == {7}


def test_pack_devices_cuts_in_order_at_the_api_limit() -> None:
    counted = [{"name": f"d{k}", "consumesCounters": []} for k in range(181)]
    packed = pack_devices(counted)
    assert [len(c) for c in packed] == [64, 64, 53]
    assert [d for chunk in packed for d in chunk] == counted
    assert [len(c) for c in pack_devices([{}] * 200)] == [128, 72]
    assert pack_devices([]) == []


def test_value_normalisation() -> None:
    assert attribute_version("9.0") == "9.0.0" and attribute_version("535.104.05") == "535.104.5"
    assert attribute_version("12") == "12.0.0"
    assert pci_bus_id("00000000:3B:00.0") == "0000:3b:00.0"
    long_name = "n" * 250
    name = resource_slice_name(long_name, 3)
    assert len(name) <= 253 and name.endswith("-gpu.tessera.dev-3")
    assert name != resource_slice_name("n" * 249, 3)


# ---- properties ---------------------------------------------------------------------------------


@st.composite
def gpus(draw: st.DrawFn, index: int) -> Gpu:
    prod = draw(st.sampled_from(PRODUCTS))
    mig = prod.mig_capable and draw(st.booleans())
    instances: list[tuple[str, int]] = []
    if mig:
        used: set[int] = set()
        for prof, start in draw(
            st.lists(
                st.sampled_from([(p, s) for p in prod.mig_profiles for s in p.placement_starts]), max_size=4
            )
        ):
            cells = set(range(start, start + prof.memory_slices))
            if cells & used or sum(1 for n, _ in instances if n == prof.name) >= prof.max_instances:
                continue
            used |= cells
            instances.append((prof.name, start))
    return make_gpu(
        index, prod, mig_enabled=mig, instances=tuple(instances), healthy=draw(st.integers(0, 9)) > 0
    )


@st.composite
def cases(draw: st.DrawFn) -> tuple[Inventory, NodeSettings, frozenset[Placement], bool]:
    n = draw(st.integers(min_value=0, max_value=12))
    inv = make_inventory(*(draw(gpus(i)) for i in range(n)))
    families = frozenset(draw(st.sets(st.sampled_from(list(registry.names())))))
    node = draw(st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True))
    names = sorted({p.name for prod in PRODUCTS for p in prod.mig_profiles})
    profiles = draw(st.none() | st.lists(st.sampled_from(names), min_size=1, unique=True))
    shares = draw(st.integers(1, MAX_SHARES))
    chosen = (
        family_settings(vgpuShares=shares)
        if profiles is None
        else family_settings(vgpuShares=shares, migProfiles=profiles)
    )
    settings_ = NodeSettings(
        node_name=node,
        families=families,
        device_order=draw(st.sampled_from(list(DeviceOrder))),
        family=chosen,
    )
    live = [Placement(g.uuid, m.profile_id, m.start) for g in inv.gpus for m in g.mig_instances]
    owned = frozenset(draw(st.lists(st.sampled_from(live), max_size=3))) if live else frozenset()
    return inv, settings_, owned, draw(st.booleans())


@settings(max_examples=60, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(cases())
def test_random_inventories_respect_every_limit(
    case: tuple[Inventory, NodeSettings, frozenset[Placement], bool],
) -> None:
    inv, settings_, owned, degraded = case
    slices = build_slices(inv, settings_, owned_placements=owned, degraded=degraded)
    check_slices(slices, settings_.node_name)
    sets = counter_sets(slices)
    for d in devices(slices):
        parsed = parse_device_name(str(d["name"]))
        assert parsed.family.name in settings_.families
        static = "gpu.tessera.dev/migStatic" in d["attributes"]
        profile = parsed.detail.profile if isinstance(parsed.detail, MigName) else None
        chosen = settings_.setting(mig.PROFILES)
        assert profile is None or static or chosen is None or profile in chosen
    # every published set can bind: its devices together want more than it holds
    demand: dict[str, Count[str]] = {}
    for d in devices(slices):
        for use in d.get("consumesCounters") or ():
            demand.setdefault(use["counterSet"], Count()).update(
                {k: quantity(v["value"]) for k, v in use["counters"].items()}
            )
    for name, totals in sets.items():
        assert any(demand[name][k] > totals[k] for k in demand[name]), name
    # and a whole GPU offered beside anything else on its GPU still consumes the counters
    for d in devices(slices):
        parsed = parse_device_name(str(d["name"]))
        siblings = [e for e in devices(slices) if parse_device_name(str(e["name"])).index == parsed.index]
        if parsed.family.name == whole.NAME and not degraded and len(siblings) > 1:
            assert "consumesCounters" in d, d["name"]
    if degraded:
        assert sets == {}
    else:
        assert_same_exclusions(inv, settings_, slices, owned=owned, up_to=2)


def sim_node(product_key: str, admin: tuple[tuple[str, int], ...]) -> SimulatedNode:
    prod = product(product_key)
    instances = []
    for name, start in admin:
        prof = prod.profile_by_name(name)
        assert prof is not None
        instances.append(AdminInstance(prof.profile_id, start))
    gpu = SimGpu(
        index=0,
        uuid=GpuUUID("GPU-0"),
        product=prod,
        pci_bus_id="00000000:18:00.0",
        mig_enabled=True,
        healthy=True,
        admin_instances=tuple(instances),
    )
    return SimulatedNode(
        node_name=NODE, seed=NODE, driver_version="550.54.15", cuda_driver_version="12.4", gpus=(gpu,)
    )


@pytest.mark.parametrize(
    ("product_key", "admin"),
    [
        ("H100-80GB-SXM", ()),
        ("A100-SXM4-40GB", ()),
        ("A30-24GB", ()),
        ("H200-141GB", ()),
        ("A30-24GB", (("1g.6gb+me", 0),)),
        ("H100-80GB-PCIE", (("2g.20gb", 2),)),
    ],
)
def test_counters_allow_exactly_what_the_gpu_allows(
    product_key: str, admin: tuple[tuple[str, int], ...]
) -> None:
    """Over every pair and triple of published MIG devices: the scheduler's counter arithmetic accepts the
    set exactly when the (simulated) driver creates all of those instances."""
    node = sim_node(product_key, admin)
    inv = SimulatedBackend(node=node, state_file=None).inventory()
    slices = build_slices(inv, NodeSettings(node_name=NODE, families=frozenset({mig.NAME})))
    check_slices(slices, NODE)
    totals = counter_sets(slices)[counter_set_name(0)]
    placements = [d for d in devices(slices) if "consumesCounters" in d]
    assert placements

    def fits(chosen: tuple[dict[str, Any], ...]) -> bool:
        used: Count[str] = Count()
        for d in chosen:
            for k, v in d["consumesCounters"][0]["counters"].items():
                used[k] += quantity(v["value"])
        return all(used[k] <= totals[k] for k in used)

    def created(chosen: tuple[dict[str, Any], ...]) -> bool:
        backend = SimulatedBackend(node=node, state_file=None)
        try:
            for d in chosen:
                parsed = parse_device_name(str(d["name"]))
                assert isinstance(parsed.detail, MigName)
                prof = node.gpus[0].product.profile_by_name(parsed.detail.profile)
                assert prof is not None
                backend.create_mig_instance(
                    gpu=GpuUUID("GPU-0"), profile_id=prof.profile_id, start=parsed.detail.start
                )
        except MigError:
            return False
        return True

    for size in (1, 2, 3):
        for chosen in combinations(placements, size):
            assert fits(chosen) == created(chosen), [d["name"] for d in chosen]
