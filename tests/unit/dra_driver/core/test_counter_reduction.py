from __future__ import annotations

from itertools import chain, combinations
from typing import Any

from hypothesis import given, settings
from hypothesis import strategies as st

from dra_driver.core.counter_reduction import reduce_counters
from tests.support.slice_checks import consumption, fits, quantity

Json = dict[str, Any]
SET = "gpu-0-counters"


def counter_set(**limits: int) -> Json:
    return {"name": SET, "counters": {k.replace("_", "-"): {"value": str(v)} for k, v in limits.items()}}


def device(name: str, **uses: int) -> Json:
    counters = {k.replace("_", "-"): {"value": str(v)} for k, v in uses.items()}
    return {
        "name": name,
        "attributes": {"gpu.tessera.dev/type": {"string": "mig"}},
        "consumesCounters": [{"counterSet": SET, "counters": counters}],
        "taints": [],
    }


def limits_of(cs: Json | None) -> dict[str, int]:
    return {} if cs is None else {k: quantity(v["value"]) for k, v in cs["counters"].items()}


def subsets(items: list[Json]) -> chain[tuple[Json, ...]]:
    return chain.from_iterable(combinations(items, k) for k in range(len(items) + 1))


def same_feasible_sets(
    before: tuple[Json | None, list[Json]], after: tuple[Json | None, tuple[Json, ...]]
) -> bool:
    full_limits, reduced_limits = limits_of(before[0]), limits_of(after[0])
    return all(
        fits(full, SET, full_limits) == fits(reduced, SET, reduced_limits)
        for full, reduced in zip(subsets(before[1]), subsets(list(after[1])), strict=True)
    )


def test_overlapping_placements_keep_only_the_slices_they_share() -> None:
    cs = counter_set(memory=80, memory_slice_0=1, memory_slice_1=1, multiprocessors=7)
    devices = [
        device("whole", memory=80, memory_slice_0=1, memory_slice_1=1, multiprocessors=7),
        device("small-0", memory=40, memory_slice_0=1, multiprocessors=3),
        device("small-1", memory=40, memory_slice_1=1, multiprocessors=3),
        device("big-0", memory=80, memory_slice_0=1, memory_slice_1=1, multiprocessors=7),
    ]
    reduced_set, reduced = reduce_counters(cs, devices)
    assert reduced_set == {
        "name": SET,
        "counters": {"memory-slice-0": {"value": "1"}, "memory-slice-1": {"value": "1"}},
    }
    assert [consumption(d, SET) for d in reduced] == [
        {"memory-slice-0": 1, "memory-slice-1": 1},
        {"memory-slice-0": 1},
        {"memory-slice-1": 1},
        {"memory-slice-0": 1, "memory-slice-1": 1},
    ]
    assert same_feasible_sets((cs, devices), (reduced_set, reduced))


def test_every_other_field_and_its_order_stays() -> None:
    cs = counter_set(memory=1)
    devices = [device("a", memory=1), device("b", memory=1)]
    devices[0]["consumesCounters"].append({"counterSet": "other", "counters": {"x": {"value": "1"}}})
    _, reduced = reduce_counters(cs, devices)
    assert list(reduced[0]) == ["name", "attributes", "consumesCounters", "taints"]
    assert reduced[0]["consumesCounters"][1] == {"counterSet": "other", "counters": {"x": {"value": "1"}}}
    assert devices[0]["consumesCounters"][0]["counters"] == {"memory": {"value": "1"}}  # input untouched


def test_a_set_that_can_never_bind_is_dropped_with_every_use_of_it() -> None:
    cs = counter_set(memory=80, memory_slice_0=1, memory_slice_1=1)
    devices = [device("a", memory=40, memory_slice_0=1), device("b", memory=40, memory_slice_1=1)]
    reduced_set, reduced = reduce_counters(cs, devices)
    assert reduced_set is None
    assert all("consumesCounters" not in d for d in reduced)


def test_a_device_that_never_fits_alone_leaves_the_model_as_it_is() -> None:
    cs = counter_set(memory=1, engines=1)
    devices = [device("a", memory=2), device("b", engines=1)]
    assert reduce_counters(cs, devices) == (cs, tuple(devices))


def test_three_devices_that_only_together_overflow_are_left_as_they_are() -> None:
    # any two fit, all three do not: no pair shows the conflict, so nothing may be dropped
    cs = counter_set(memory=2, engines=9)
    devices = [device(n, memory=1, engines=1) for n in "abc"]
    assert reduce_counters(cs, devices) == (cs, tuple(devices))


NAMES = ("memory", "multiprocessors", "ofa-engines", "memory-slice-0", "memory-slice-1", "memory-slice-2")


@st.composite
def models(draw: st.DrawFn) -> tuple[Json, list[Json]]:
    limits = {n: draw(st.integers(1, 4)) for n in NAMES}
    cs = {"name": SET, "counters": {k: {"value": str(v)} for k, v in limits.items()}}
    devices = []
    for k in range(draw(st.integers(1, 7))):
        uses = draw(st.dictionaries(st.sampled_from(NAMES), st.integers(0, 4), min_size=1))
        counters = {n: {"value": str(v)} for n, v in uses.items()}
        devices.append({"name": f"d{k}", "consumesCounters": [{"counterSet": SET, "counters": counters}]})
    return cs, devices


@settings(max_examples=300, deadline=None)
@given(models())
def test_the_reduced_model_allows_exactly_the_same_sets(model: tuple[Json, list[Json]]) -> None:
    cs, devices = model
    reduced_set, reduced = reduce_counters(cs, devices)
    assert same_feasible_sets((cs, devices), (reduced_set, reduced))
    kept = sum(len(consumption(d, SET)) for d in reduced)
    assert kept <= sum(len(consumption(d, SET)) for d in devices)
    if (reduced_set, reduced) != (cs, tuple(devices)) and reduced_set is not None:
        used = {k for d in reduced for k in consumption(d, SET)}
        assert set(reduced_set["counters"]) == used
