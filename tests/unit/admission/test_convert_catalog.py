"""The catalog of offered products, read from any node's ResourceSlices: a bad device is skipped and
reported, never fatal, and never changes what the other devices and slices offer."""

from __future__ import annotations

import time
from typing import Any

import pytest

from admission.convert.catalog import MAX_MEMORY_MIB, Catalog, Product, Skipped, from_slices
from tests.support.catalog_slices import EXPECTED, GOOD, H100, INJECTION, L4, device, slice_of


def test_products_and_profiles_come_from_the_slices() -> None:
    catalog = from_slices([GOOD, L4, slice_of("other", device("x", "gpu", "Other GPU"), driver="other.dev")])
    assert catalog.products == EXPECTED and catalog.skipped == ()


FULL_WIDTH_1024 = "\uff11\uff10\uff12\uff14"


@pytest.mark.parametrize(
    ("bad", "field", "why"),
    [
        (device("d", "mig", H100, "5Gi", "xg.5gb"), "profile]", "not of the form <N>g.<M>gb"),
        (device("d", "mig", H100, "5Gi", "1g.5gb\n"), "profile]", "not a MIG profile"),
        (device("d", "mig", H100, "5Gi", "\uff11g.5gb"), "profile]", "not of the form"),
        (device("d", "mig", H100, "5Gi", 7), "profile]", "7 is not a string"),
        (device("d", "mig", H100, "5Gi", None), "profile]", "None is not a string"),
        (device("d", "gpu", 42), "productName]", "42 is not a string"),
        (device("d", "gpu", "NVIDIA\nH100"), "productName]", "not a product name"),
        (device("d", "gpu", "NVIDIA \x1b[31mH100"), "productName]", "not a product name"),
        (device("d", "gpu", "\ud800"), "productName]", "not a product name"),
        (device("d", "gpu", " NVIDIA L4"), "productName]", "not a product name"),
        (device("d", "gpu", ""), "productName]", "not a product name"),
        (device("d", "gpu", "N" * 1_000_000), "productName]", "(1000000 characters)"),
        (device("d", "gpu", "NVIDIA X", "1e99999"), "capacity[memory]", "is not a quantity"),
        (device("d", "gpu", "NVIDIA X", "1e999"), "capacity[memory]", "not a GPU's memory"),
        (device("d", "gpu", "NVIDIA X", FULL_WIDTH_1024 + "Mi"), "capacity[memory]", "is not a quantity"),
        (device("d", "gpu", "NVIDIA X", "1Ei"), "capacity[memory]", f"1 MiB to {MAX_MEMORY_MIB} MiB"),
        (device("d", "gpu", "NVIDIA X", "-1Gi"), "capacity[memory]", "not a GPU's memory"),
        (device("d", "gpu", "NVIDIA X", ["80Gi"]), "capacity[memory]", "is not a quantity"),
    ],
)
def test_a_bad_device_is_skipped_and_reported_the_rest_still_counts(bad: Any, field: str, why: str) -> None:
    started = time.perf_counter()
    catalog = from_slices([slice_of("evil", device("ok", "gpu", "NVIDIA A30", "24Gi"), bad), GOOD, L4])
    assert time.perf_counter() - started < 1.0
    assert catalog.products == (Product("NVIDIA A30", 24576), *EXPECTED)
    [skipped] = catalog.skipped
    assert (skipped.slice, skipped.device) == ("evil", "d")
    assert skipped.field.endswith(field) and why in skipped.why
    assert len(str(skipped)) < 400


def test_the_malformed_profile_of_the_issue_changes_only_its_own_entry() -> None:
    evil = slice_of("evil", device("gpu-0-mig-x", "mig", H100, "5Gi", "xg.5gb"))
    catalog = from_slices([evil, GOOD, L4])
    assert catalog.products == EXPECTED
    assert catalog.skipped == (
        Skipped(
            "evil",
            "gpu-0-mig-x",
            "attributes[gpu.tessera.dev/profile]",
            "MIG profile 'xg.5gb' is not of the form <N>g.<M>gb[+me]",
        ),
    )
    assert str(catalog.skipped[0]).startswith("ResourceSlice evil, device gpu-0-mig-x: attributes[")


def test_a_device_that_is_no_object_is_skipped_and_a_slice_that_is_no_object_ignored() -> None:
    catalog = from_slices([slice_of("evil", "gpu-0", None), {"spec": "x"}, GOOD, L4])
    assert catalog.products == EXPECTED
    assert [(s.device, s.field) for s in catalog.skipped] == [
        ("#0", "spec.devices[]"),
        ("#1", "spec.devices[]"),
    ]


def test_a_quoting_product_name_is_kept_for_the_selector_to_escape() -> None:
    catalog = from_slices(
        [slice_of("evil", device("gpu-0", "gpu", INJECTION, "1Mi"), device("q", "gpu", '"')), L4]
    )
    assert [p.name for p in catalog.products] == ['"', INJECTION, "NVIDIA L4"]


def test_what_was_skipped_is_not_what_the_catalog_is() -> None:
    evil = slice_of("evil", device("d", "mig", H100, "5Gi", "xg.5gb"))
    assert from_slices([evil, GOOD, L4]) == from_slices([GOOD, L4]) == Catalog(EXPECTED)
