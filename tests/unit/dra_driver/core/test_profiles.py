from __future__ import annotations

import pytest

from dra_driver.core.profiles import PRODUCTS, find_product, product, profile_order
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import Architecture


def test_eight_slice_gpus_have_25_placements_that_fit() -> None:
    for p in PRODUCTS:
        if p.memory_slice_count != 8:
            continue
        assert sum(len(prof.placement_starts) for prof in p.mig_profiles) == 25, p.key
        for prof in p.mig_profiles:
            for start in prof.placement_starts:
                assert start + prof.memory_slices <= p.memory_slice_count, (p.key, prof.name, start)


def test_h100_sxm_table_matches_nvidia_smi() -> None:
    h100 = product("NVIDIA H100 80GB HBM3")
    one = h100.profile_by_id(19)
    assert one is not None
    assert (one.name, one.memory_mib, one.multiprocessors, one.max_instances) == ("1g.10gb", 9984, 16, 7)
    me = h100.profile_by_name("1g.10gb+me")
    assert me is not None and me.profile_id == 20 and me.ofa_engines == 1 and me.max_instances == 1
    three = h100.profile_by_id(9)
    assert three is not None
    assert (three.name, three.memory_slices, three.compute_slices, three.placement_starts) == (
        "3g.40gb",
        4,
        3,
        (0, 4),
    )
    seven = h100.profile_by_id(0)
    assert seven is not None and seven.memory_slices == 8 and seven.multiprocessors == 132
    assert h100.architecture is Architecture.HOPPER and h100.architecture.can_toggle_mig_without_reset


def test_pcie_differs_only_in_multiprocessors() -> None:
    sxm, pcie = product("H100-80GB-SXM"), product("h100-80gb-pcie")
    assert [p.memory_mib for p in sxm.mig_profiles] == [p.memory_mib for p in pcie.mig_profiles]
    assert [p.multiprocessors for p in pcie.mig_profiles] == [14, 14, 14, 30, 46, 62, 114]


def test_a100_cannot_toggle_and_a30_has_four_slices() -> None:
    a100 = product("A100-SXM4-40GB")
    assert not a100.architecture.can_toggle_mig_without_reset
    assert a100.profile_by_name("1g.5gb") is not None
    a30 = product("NVIDIA A30")
    assert a30.memory_slice_count == 4
    assert all(s + p.memory_slices <= 4 for p in a30.mig_profiles for s in p.placement_starts)


def test_l4_cannot_do_mig() -> None:
    l4 = product("L4")
    assert not l4.mig_capable and l4.mig_profiles == () and l4.architecture is Architecture.ADA


def test_profile_ids_unique_per_product_and_profiles_fit_the_gpu() -> None:
    for p in PRODUCTS:
        ids = [prof.profile_id for prof in p.mig_profiles]
        assert len(ids) == len(set(ids)), p.key
        for prof in p.mig_profiles:
            assert prof.memory_mib <= p.memory_mib and prof.multiprocessors <= p.multiprocessors, (
                p.key,
                prof.name,
            )


def test_tables_are_in_the_published_order() -> None:
    """The NVML backend sorts what the driver lists by `profile_order`; the tables must already be so."""
    for p in PRODUCTS:
        assert list(p.mig_profiles) == sorted(p.mig_profiles, key=profile_order), p.key
    h100 = product("H100-80GB-SXM")
    assert [m.name for m in h100.mig_profiles][:4] == ["1g.10gb", "1g.10gb+me", "1g.20gb", "2g.20gb"]


def test_unknown_product_names_the_choices() -> None:
    assert find_product("GeForce 256") is None
    with pytest.raises(ConfigError, match="H100-80GB-SXM"):
        product("GeForce 256")
