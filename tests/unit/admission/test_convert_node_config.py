"""HAMi's node configuration → the node group setting that stands for it
(admission/convert/node_config.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from admission.convert.node_config import MAX_NODE_ENTRIES, hami_node_notes


def test_the_schedulers_global_scaling_is_every_groups_memory_oversubscription() -> None:
    (note,) = hami_node_notes(
        {"device-config.yaml": {"nvidia": {"deviceMemoryScaling": 2, "deviceSplitCount": 10}}}
    )
    assert note.startswith(
        "device-config.yaml: nvidia.deviceMemoryScaling 2 is nodeGroups[].memoryOversubscription: 2 for "
        "every group"
    )
    assert "only claims that opt in (DeviceClass vgpu-oversubscribed.tessera.dev" in note


def test_the_device_plugins_per_node_scaling_names_the_node() -> None:
    doc = {"nodeconfig": [{"name": "a", "devicesplitcount": 4}, {"name": "b", "devicememoryscaling": 1.5}]}
    (note,) = hami_node_notes({"config.json": doc})
    assert note.startswith(
        "config.json: nodeconfig[1].devicememoryscaling 1.5 is nodeGroups[].memoryOversubscription: 1.5 "
        "for the group of node b;"
    )


def test_values_tessera_has_no_equivalent_for_say_so() -> None:
    notes = hami_node_notes(
        {
            "a.yaml": {"nvidia": {"deviceMemoryScaling": 1}},
            "b.yaml": {"nvidia": {"deviceMemoryScaling": 0.5}},
            "c.yaml": {"nvidia": {"deviceMemoryScaling": 10}},
            "d.yaml": {"nvidia": {"deviceMemoryScaling": "two"}},
            "e.yaml": {"nvidia": {"deviceMemoryScaling": True}},
        }
    )
    assert notes == (
        "a.yaml: nvidia.deviceMemoryScaling 1: Tessera's default (memoryOversubscription: 1, no "
        "oversubscription); nothing to set",
        "b.yaml: nvidia.deviceMemoryScaling 0.5: Tessera does not scale a GPU's memory down "
        "(memoryOversubscription is at least 1); give claims smaller memory requests instead",
        notes[2],
        "d.yaml: nvidia.deviceMemoryScaling: 'two' is not a number; HAMi's deviceMemoryScaling is Tessera's "
        "memoryOversubscription",
        "e.yaml: nvidia.deviceMemoryScaling: True is not a number; HAMi's deviceMemoryScaling is Tessera's "
        "memoryOversubscription",
    )
    assert notes[2].startswith(
        "c.yaml: nvidia.deviceMemoryScaling 10: Tessera's memoryOversubscription is at most 8; set "
        "nodeGroups[].memoryOversubscription: 8 or less for every group"
    )


def test_data_without_hamis_scaling_says_nothing_and_a_long_node_list_is_cut() -> None:
    assert hami_node_notes({}) == ()
    assert (
        hami_node_notes({"x.yaml": "text", "y.json": [1, 2], "z.yaml": {"nvidia": {"deviceSplitCount": 4}}})
        == ()
    )
    nodes = [{"name": f"n{i}", "devicememoryscaling": 2} for i in range(MAX_NODE_ENTRIES + 5)]
    notes = hami_node_notes({"config.json": {"nodeconfig": nodes}})
    assert len(notes) == MAX_NODE_ENTRIES + 1
    assert notes[-1] == "config.json: nodeconfig: 5 more nodes not read"


_ANY = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=20), inner, max_size=4),
    max_leaves=20,
)


@given(
    st.dictionaries(st.text(max_size=20), _ANY | st.fixed_dictionaries({"nvidia": _ANY, "nodeconfig": _ANY}))
)
def test_any_parsed_data_gives_bounded_notes_and_never_raises(data: dict[str, object]) -> None:
    for note in hami_node_notes(data):
        assert len(note) < 1000
