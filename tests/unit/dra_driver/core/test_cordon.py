"""An administrator's GPU cordons: the Node annotation's parser and formatter, the taints they become on every
device of the GPU, beside the health taints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.cordon import (
    MAX_ANNOTATION_CHARS,
    GpuCordon,
    cordon_taints,
    merged_taints,
    parse_cordons,
    render_cordons,
    with_cordon,
    without_cordon,
)
from dra_driver.core.families import parse_device_name
from dra_driver.core.gpu_health import Effect
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices, device_names
from dra_driver.core.taints import gpu_taints, inventory_taints
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import CORDON_ANNOTATION, CORDON_TAINT_KEY
from tests.support.inventories import make_gpu, make_inventory
from tests.support.slice_checks import check_slices, devices

NODE = "node-a"
NOON = 1795867200  # 2026-11-28T12:00:00Z

cordons_strategy = st.dictionaries(
    st.integers(min_value=0, max_value=15),
    st.tuples(st.sampled_from(list(Effect)), st.integers(min_value=0, max_value=4_000_000_000)),
    max_size=16,
).map(lambda d: {i: GpuCordon(i, effect, since) for i, (effect, since) in d.items()})


@given(cordons_strategy)
def test_what_render_writes_parse_reads_back(cordons: dict[int, GpuCordon]) -> None:
    text = render_cordons(cordons)
    assert parse_cordons(text) == cordons
    assert len(text) <= MAX_ANNOTATION_CHARS


def test_the_written_form_reads_as_a_person_writes_it() -> None:
    cordons = {3: GpuCordon(3, Effect.NO_SCHEDULE, NOON), 12: GpuCordon(12, Effect.NO_EXECUTE)}
    assert render_cordons(cordons) == "gpu-3=NoSchedule@2026-11-28T12:00:00Z,gpu-12=NoExecute"
    assert parse_cordons(" gpu-12=NoExecute , gpu-3=NoSchedule@2026-11-28T12:00:00Z,") == cordons
    assert parse_cordons("") == {}


@pytest.mark.parametrize(
    ("text", "names"),
    [
        ("gpu-3=Cordon", "'gpu-3=Cordon' is not an entry"),
        ("gpu-03=NoSchedule", "is not an entry"),
        ("gpu-3 = NoSchedule", "is not an entry"),
        ("gpu-٣=NoSchedule", "is not an entry"),  # an Arabic-Indic digit is no index
        ("gpu-16=NoSchedule", "names GPU 16, a node has at most 16"),
        ("gpu-2=NoSchedule,gpu-2=NoExecute", "gpu-2 is named twice"),
        ("gpu-2=NoSchedule@2026-13-40T99:00:00Z", "has no valid time"),
        ("gpu-1=NoSchedule," * 400, "over 4096"),
    ],
)
def test_a_bad_annotation_names_itself_the_entry_and_the_fix(text: str, names: str) -> None:
    with pytest.raises(ConfigError) as e:
        parse_cordons(text)
    assert CORDON_ANNOTATION in str(e.value) and names in str(e.value)
    assert len(str(e.value)) < 400  # the entry is clipped, never echoed whole


@given(st.text(max_size=200))
def test_any_text_parses_or_is_refused_with_a_config_error(text: str) -> None:
    try:
        parsed = parse_cordons(text)
    except ConfigError:
        return
    assert all(0 <= i < 16 and c.index == i for i, c in parsed.items())


def test_cordon_drain_and_uncordon_edit_one_gpu_and_keep_the_time_of_an_unchanged_one() -> None:
    first = with_cordon({}, 3, Effect.NO_SCHEDULE, now=NOON)
    assert first == {3: GpuCordon(3, Effect.NO_SCHEDULE, NOON)}
    assert with_cordon(first, 3, Effect.NO_SCHEDULE, now=NOON + 60) == first  # cordoning twice: no change
    drained = with_cordon(first, 3, Effect.NO_EXECUTE, now=NOON + 60)
    assert drained == {3: GpuCordon(3, Effect.NO_EXECUTE, NOON + 60)}
    both = with_cordon(drained, 5, Effect.NO_SCHEDULE, now=NOON)
    assert without_cordon(both, 3) == {5: GpuCordon(5, Effect.NO_SCHEDULE, NOON)}
    assert without_cordon(both, 7) == both


def test_every_device_of_a_cordoned_gpu_carries_the_cordon_and_no_other_gpu_does() -> None:
    inv = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM"))
    taints = cordon_taints(inv, {1: GpuCordon(1, Effect.NO_EXECUTE), 9: GpuCordon(9, Effect.NO_SCHEDULE)})
    assert set(taints) == {inv.gpus[1].uuid}  # a GPU the node does not have taints nothing
    slices = build_slices(inv, NodeSettings(node_name=NODE), taints=taints)
    check_slices(slices, NODE)
    on_1 = [d for d in devices(slices) if parse_device_name(d["name"]).index == 1]
    assert len(on_1) == 28  # whole, vgpu, MPS and 25 MIG placements
    assert all(
        d["taints"] == [{"key": CORDON_TAINT_KEY, "value": "drain", "effect": "NoExecute"}] for d in on_1
    )
    assert not any("taints" in d for d in devices(slices) if parse_device_name(d["name"]).index == 0)


def test_a_cordon_with_a_time_gives_its_taint_that_time_so_a_republish_writes_the_same() -> None:
    inv = make_inventory(make_gpu(0, "L4"))
    (taint,) = cordon_taints(inv, {0: GpuCordon(0, Effect.NO_SCHEDULE, NOON)})[inv.gpus[0].uuid]
    assert taint == {
        "key": CORDON_TAINT_KEY,
        "value": "cordon",
        "effect": "NoSchedule",
        "timeAdded": "2026-11-28T12:00:00Z",
    }


def test_a_cordoned_gpu_that_is_also_unhealthy_carries_both_taints() -> None:
    inv = make_inventory(make_gpu(0, "L4", healthy=False), make_gpu(1, "L4"))
    cordons = {0: GpuCordon(0, Effect.NO_SCHEDULE)}
    taints = merged_taints(inventory_taints(inv), cordon_taints(inv, cordons))
    keys = [t["key"] for t in taints[inv.gpus[0].uuid]]
    assert keys == ["gpu.tessera.dev/unhealthy", CORDON_TAINT_KEY]
    assert "timeAdded" not in taints[inv.gpus[0].uuid][1]  # no time known: the API server's to set
    assert merged_taints(gpu_taints({}), {}) == {}


def test_where_the_api_server_cannot_keep_taints_a_cordoned_gpu_offers_nothing() -> None:
    inv = make_inventory(make_gpu(0, "L4"), make_gpu(1, "L4"))
    taints = cordon_taints(inv, {0: GpuCordon(0, Effect.NO_SCHEDULE, NOON)})
    old_cluster = build_slices(inv, NodeSettings(node_name=NODE), taints=taints, taints_supported=False)
    assert device_names(old_cluster) == ["gpu-1-vgpu", "gpu-1-mps", "gpu-1"]
