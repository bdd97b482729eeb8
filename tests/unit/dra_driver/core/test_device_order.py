from __future__ import annotations

from collections import Counter as Count
from dataclasses import replace
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.core.device_order import DeviceOrder, order_devices
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, mps, parse_device_name, vgpu
from dra_driver.core.families.mig import MigName
from dra_driver.core.profiles import PRODUCTS
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices, device_names
from tests.support.inventories import make_gpu, make_inventory
from tests.support.slice_checks import counter_sets, devices, quantity

NODE = "node-a"
NEW = NodeSettings(node_name=NODE)
OLD = NodeSettings(node_name=NODE, device_order=DeviceOrder.BY_GPU)
H100X8 = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(8)))


def visit_order(inventory: Any, node_settings: NodeSettings) -> list[str]:
    """Device names in the order kube-scheduler visits them: slices by name, then slice order."""
    slices = sorted(build_slices(inventory, node_settings), key=lambda s: s["metadata"]["name"])
    return device_names(slices)


def first_fit(slices: list[dict[str, Any]], wanted: list[str]) -> list[str | None]:
    """kube-scheduler's walk for one-device claims, arriving one after another: the first device whose name
    matches the wanted kind (`gpu`, `vgpu` or a MIG profile label such as `1g10gb`) and whose counters fit."""
    totals = {(cs, k): v for cs, counters in counter_sets(slices).items() for k, v in counters.items()}
    used: Count[tuple[str, str]] = Count()
    taken: set[str] = set()
    ordered = devices(sorted(slices, key=lambda s: s["metadata"]["name"]))
    placed: list[str | None] = []
    for kind in wanted:
        pick = None
        for d in ordered:
            parsed = parse_device_name(d["name"])
            label = parsed.family.name if parsed.family.name != mig.NAME else d["name"].split("-")[3]
            if label != kind or d["name"] in taken:
                continue
            (use,) = d["consumesCounters"]
            need = {(use["counterSet"], k): quantity(v["value"]) for k, v in use["counters"].items()}
            if all(used[k] + v <= totals[k] for k, v in need.items()):
                pick = d["name"]
                used.update(need)
                taken.add(pick)
                break
        placed.append(pick)
    return placed


def profile_of(name: str) -> str | None:
    detail = parse_device_name(name).detail
    return detail.profile if isinstance(detail, MigName) else None


def test_the_fragmentation_aware_order_of_eight_h100s() -> None:
    names = visit_order(H100X8, NEW)
    assert names[:24] == (
        [f"gpu-{i}-vgpu" for i in range(8)]
        + [f"gpu-{i}-mps" for i in range(8)]
        + [f"gpu-{i}" for i in range(7, -1, -1)]
    )
    one_g = [n for n in names if "-mig-1g10gb-" in n and "-me-" not in n]
    assert one_g[:8] == [f"gpu-0-mig-1g10gb-{s}" for s in range(6, -1, -1)] + ["gpu-1-mig-1g10gb-6"]
    mig = [n for n in names if "-mig-" in n]
    profiles = [profile_of(n) for n in mig]
    # smallest profile first, each profile's placements together
    assert list(dict.fromkeys(profiles)) == [
        "1g.10gb",
        "1g.10gb+me",
        "1g.20gb",
        "2g.20gb",
        "3g.40gb",
        "4g.40gb",
        "7g.80gb",
    ]
    runs = [p for k, p in enumerate(profiles) if k == 0 or p != profiles[k - 1]]
    assert runs == list(dict.fromkeys(profiles))  # one run per profile
    three_g = [n for n in mig if n.startswith("gpu-0-mig-3g40gb")]
    assert three_g == ["gpu-0-mig-3g40gb-4", "gpu-0-mig-3g40gb-0"]
    assert len(names) == 224 and sorted(names) == sorted(visit_order(H100X8, OLD))


def test_the_by_gpu_order_is_the_one_before() -> None:
    names = visit_order(H100X8, OLD)
    assert names[:5] == ["gpu-0", "gpu-0-vgpu", "gpu-0-mps", "gpu-0-mig-1g10gb-0", "gpu-0-mig-1g10gb-1"]
    assert names[28:31] == ["gpu-1", "gpu-1-vgpu", "gpu-1-mps"]


def test_small_placements_leave_slot_zero_open_for_a_4g() -> None:
    one = make_inventory(make_gpu(0, "H100-80GB-SXM"))
    wanted = ["1g10gb", "1g10gb", "1g10gb", "4g40gb"]
    assert first_fit(build_slices(one, OLD), wanted)[-1] is None
    assert first_fit(build_slices(one, NEW), wanted) == [
        "gpu-0-mig-1g10gb-6",
        "gpu-0-mig-1g10gb-5",
        "gpu-0-mig-1g10gb-4",
        "gpu-0-mig-4g40gb-0",
    ]


def test_whole_gpus_come_from_the_far_end_of_sharing() -> None:
    two = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(2)))
    wanted = ["gpu", "1g10gb", "4g40gb"]
    assert first_fit(build_slices(two, OLD), wanted) == ["gpu-0", "gpu-1-mig-1g10gb-0", None]
    assert first_fit(build_slices(two, NEW), wanted) == ["gpu-1", "gpu-0-mig-1g10gb-6", "gpu-0-mig-4g40gb-0"]


def test_vgpu_stays_on_the_first_shared_gpu() -> None:
    two = make_inventory(*(make_gpu(i, "H100-80GB-SXM") for i in range(2)))
    assert first_fit(build_slices(two, NEW), ["vgpu", "gpu"]) == ["gpu-0-vgpu", "gpu-1"]


def test_order_devices_keeps_the_given_order_for_by_gpu() -> None:
    devs = [{"name": "b"}, {"name": "a"}]
    assert order_devices(devs, DeviceOrder.BY_GPU) == devs


@st.composite
def inventories(draw: st.DrawFn) -> Any:
    n = draw(st.integers(min_value=1, max_value=8))
    prods = [draw(st.sampled_from(PRODUCTS)) for _ in range(n)]
    return make_inventory(*(make_gpu(i, p, mig_enabled=draw(st.booleans())) for i, p in enumerate(prods)))


@settings(max_examples=40, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(inventories())
def test_the_order_is_a_permutation_with_its_rules(inventory: Any) -> None:
    new, old = visit_order(inventory, NEW), visit_order(inventory, OLD)
    assert sorted(new) == sorted(old)
    parsed = [parse_device_name(n) for n in new]
    families = [p.family.name for p in parsed]
    # families grouped: vgpu, MPS, then whole GPUs, then MIG
    rank = {vgpu.NAME: 0, mps.NAME: 1, whole.NAME: 2, mig.NAME: 3}
    assert [rank[f] for f in families] == sorted(rank[f] for f in families)
    for sharing in (vgpu.NAME, mps.NAME):
        indexes = [p.index for p in parsed if p.family.name == sharing]
        assert indexes == sorted(indexes)
    wholes = [p.index for p in parsed if p.family.name == whole.NAME]
    assert wholes == sorted(wholes, reverse=True)
    migs = [(p.index, p.detail) for p in parsed if isinstance(p.detail, MigName)]
    for profile in {d.profile for _, d in migs}:
        placements = [(i, d.start) for i, d in migs if d.profile == profile]
        assert placements == sorted(placements, key=lambda ps: (ps[0], -(ps[1] or 0)))


def hgx(numa_of: Any = lambda i: i // 4) -> Any:
    """8 x H100 with NUMA nodes and PCIe roots (two GPUs per root); `numa_of(i)` places GPU i."""
    return make_inventory(
        *(
            replace(
                make_gpu(i, "H100-80GB-SXM"),
                numa_node=numa_of(i),
                pcie_root=f"pci0000:{0x15 + numa_of(i):02x}",
            )
            for i in range(8)
        )
    )


def free_numa_nodes(placed: list[str | None], numa_of: Any = lambda i: i // 4) -> set[int]:
    busy = {numa_of(parse_device_name(n).index) for n in placed if n is not None}
    return {0, 1} - busy


def test_with_topology_whole_gpus_fill_the_first_numa_node_before_the_next() -> None:
    names = visit_order(hgx(), NEW)
    assert [n for n in names if parse_device_name(n).family is whole.FAMILY] == [
        f"gpu-{i}" for i in (3, 2, 1, 0, 7, 6, 5, 4)
    ]
    assert [n for n in names if n.endswith("-vgpu")] == [f"gpu-{i}-vgpu" for i in range(8)]


def test_a_numa_node_stays_free_for_four_gpus_while_small_requests_fit_in_the_other() -> None:
    wanted = ["vgpu", "gpu", "1g10gb", "gpu"]  # as many GPUs as one NUMA node holds
    # the order without topology: whole GPUs from GPU 7 down, slices from GPU 0 up, both NUMA nodes touched
    blind = make_inventory(*(replace(g, numa_node=None, pcie_root=None) for g in hgx().gpus))
    before = first_fit(build_slices(blind, NEW), wanted)
    assert before == ["gpu-0-vgpu", "gpu-7", "gpu-1-mig-1g10gb-6", "gpu-6"]
    assert free_numa_nodes(before) == set()
    placed = first_fit(build_slices(hgx(), NEW), wanted)
    assert placed == ["gpu-0-vgpu", "gpu-3", "gpu-1-mig-1g10gb-6", "gpu-2"]
    assert free_numa_nodes(placed) == {1}


def test_interleaved_numa_nodes_are_walked_domain_by_domain() -> None:
    def numa_of(i: int) -> int:
        return i % 2  # GPUs alternate between the sockets

    names = visit_order(hgx(numa_of), NEW)
    assert [n for n in names if n.endswith("-vgpu")] == [f"gpu-{i}-vgpu" for i in (0, 2, 4, 6, 1, 3, 5, 7)]
    assert [n for n in names if parse_device_name(n).family is whole.FAMILY] == [
        f"gpu-{i}" for i in (6, 4, 2, 0, 7, 5, 3, 1)
    ]
    placed = first_fit(build_slices(hgx(numa_of), NEW), ["vgpu", "gpu", "gpu", "1g10gb"])
    assert free_numa_nodes(placed, numa_of) == {1}
    assert (
        free_numa_nodes(first_fit(build_slices(hgx(numa_of), OLD), ["vgpu", "gpu", "gpu", "1g10gb"]), numa_of)
        == set()
    )
