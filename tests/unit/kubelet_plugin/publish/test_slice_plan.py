from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from kubelet_plugin.publish.slice_plan import Verb, canonical, dropped_fields, plan, with_generation

NODES = Path(__file__).resolve().parents[4] / "e2e" / "nodes"
NODE = "sim-h100x8"


def desired(file: str = "h100x8.yaml") -> list[dict[str, Any]]:
    inv = SimulatedBackend.from_file(node_file=NODES / file, state_file=None).inventory()
    return build_slices(inv, NodeSettings(node_name=NODE))


def stored(slices: list[dict[str, Any]], generation: int) -> list[dict[str, Any]]:
    """What the API server would return: our objects with a resourceVersion and canonical quantities."""
    out = []
    for n, s in enumerate(slices):
        obj = with_generation(s, generation)
        obj["metadata"]["resourceVersion"] = str(100 + n)
        out.append(obj)
    return out


def test_empty_pool_creates_everything_at_generation_one() -> None:
    want = desired()
    p = plan(want, [])
    assert p.generation == 1 and [a.verb for a in p.actions] == [Verb.CREATE] * 5
    assert all(a.body is not None and a.body["spec"]["pool"]["generation"] == 1 for a in p.actions)


def test_nothing_changed_means_no_actions() -> None:
    want = desired()
    assert plan(want, stored(want, 4)).actions == ()
    assert plan(want, stored(want, 4)).generation == 4


def test_quantities_compare_by_value() -> None:
    want = desired()
    have = stored(want, 2)
    # The API server canonicalises quantities: 81559Mi stays, but e.g. 16384Mi comes back as 16Gi.
    have[1]["spec"]["devices"][0]["capacity"]["memory"]["value"] = "85520809984"
    assert plan(want, have).actions == ()
    assert canonical({"value": "16384Mi"}) == canonical({"value": "16Gi"})


def test_one_change_rewrites_the_whole_pool_with_the_next_generation() -> None:
    want = desired()
    have = stored(want, 3)
    changed = copy.deepcopy(want)
    changed[2]["spec"]["devices"].pop()
    p = plan(changed, have)
    assert p.generation == 4
    assert [a.verb for a in p.actions] == [Verb.UPDATE] * 5
    assert [a.resource_version for a in p.actions] == ["100", "101", "102", "103", "104"]
    assert all(
        a.body is not None and a.body["metadata"]["resourceVersion"] == a.resource_version for a in p.actions
    )


def test_extra_slices_are_deleted_after_the_writes() -> None:
    want = desired()
    extra = copy.deepcopy(want[1])
    extra["metadata"]["name"] = f"{NODE}-gpu.tessera.dev-9"
    have = stored([*want, extra], 1)
    p = plan(want, have)
    verbs = [a.verb for a in p.actions]
    assert verbs == [Verb.UPDATE] * 5 + [Verb.DELETE]
    assert p.actions[-1].name == f"{NODE}-gpu.tessera.dev-9" and p.actions[-1].resource_version == "105"


def test_mixed_generations_are_repaired() -> None:
    want = desired()
    have = stored(want, 2)
    have[0]["spec"]["pool"]["generation"] = 1
    p = plan(want, have)
    assert p.generation == 3 and len(p.actions) == 5


def test_fewer_slices_after_an_inventory_change() -> None:
    have = stored(desired(), 5)
    smaller = desired("mixed-a100-l4.yaml")
    p = plan(smaller, have)
    assert [a.verb for a in p.actions] == [Verb.UPDATE, Verb.UPDATE, Verb.DELETE, Verb.DELETE, Verb.DELETE]
    assert all(a.body is None or a.body["spec"]["pool"]["resourceSliceCount"] == 2 for a in p.actions)


def test_dropped_fields_are_reported_outermost_first() -> None:
    want = desired()
    have = stored(want, 1)
    del have[0]["spec"]["sharedCounters"]
    vgpu = have[1]["spec"]["devices"][1]
    del vgpu["allowMultipleAllocations"]
    del vgpu["capacity"]["memory"]["requestPolicy"]
    for d in have[1]["spec"]["devices"]:
        d.pop("consumesCounters", None)
    found = dropped_fields(want, have[:4])
    assert f"{NODE}-gpu.tessera.dev-0: spec.sharedCounters" in found
    assert f"{NODE}-gpu.tessera.dev-1: spec.devices[1].allowMultipleAllocations" in found
    assert f"{NODE}-gpu.tessera.dev-1: spec.devices[1].capacity.memory.requestPolicy" in found
    assert f"{NODE}-gpu.tessera.dev-1: spec.devices[0].consumesCounters" in found
    # A deleted slice is someone's change to repair, not a sign of a disabled feature gate.
    assert not any(f.startswith(f"{NODE}-gpu.tessera.dev-4") for f in found)
    assert not any("consumesCounters[0]" in f for f in found)
    assert dropped_fields(want, stored(want, 1)) == []
