"""Volcano's configuration in the e2e cluster: the DRA guide's scheduler configuration, and the gates
vc-scheduler gets from the plane's."""

from __future__ import annotations

from e2e.controlplane.releases import RELEASES
from e2e.volcano.config import (
    DRA_ARGUMENT,
    binpack_conf,
    gates_flag,
    reclaim_conf,
    scheduler_conf,
    scheduler_gates,
)

V137 = RELEASES["v1.37.2"]
V135 = RELEASES["v1.35.4"]


def test_conf_is_the_dra_guides() -> None:
    conf = scheduler_conf()
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "backfill"]
    names = [[p["name"] for p in tier["plugins"]] for tier in conf["tiers"]]
    assert names == [["priority", "gang"], ["drf", "predicates", "proportion", "nodeorder", "binpack"]]
    predicates = next(p for p in conf["tiers"][1]["plugins"] if p["name"] == "predicates")
    assert predicates["arguments"] == {DRA_ARGUMENT: True}


def test_gates_are_the_planes_that_volcano_knows() -> None:
    gates = scheduler_gates({"DRADerivedAttributes": True}, plane_release=V137)
    # on by default in 1.37 and known to the vendored 1.36 packages
    assert (
        gates["DRAConsumableCapacity"] and gates["DRAPartitionableDevices"] and gates["DRADeviceTaintRules"]
    )
    # off in the plane: not passed
    assert "DRAResourcePoolStatus" not in gates
    # on in the plane but new in 1.37: never passed, vc-scheduler would refuse to start on it
    assert "DRADerivedAttributes" not in gates
    assert all(RELEASES["v1.36.3"].knows(g) for g in gates)
    assert all(gates.values())


def test_gates_follow_the_plane_and_always_enable_dra() -> None:
    assert scheduler_gates({}, plane_release=V135).get("DRAConsumableCapacity") is None
    turned_on = scheduler_gates({"DRAConsumableCapacity": True}, plane_release=V135)
    assert turned_on["DRAConsumableCapacity"] is True
    assert scheduler_gates({"DynamicResourceAllocation": False}, plane_release=V137)[
        "DynamicResourceAllocation"
    ]


def test_gates_flag() -> None:
    assert gates_flag({"B": True, "A": False}) == "--feature-gates=A=false,B=true"


def test_reclaim_conf_adds_the_action_and_keeps_the_plugins() -> None:
    conf = reclaim_conf()
    assert [a.strip() for a in conf["actions"].split(",")] == ["enqueue", "allocate", "reclaim", "backfill"]
    assert conf["tiers"] == scheduler_conf()["tiers"]


def test_binpack_conf_weighs_binpack_alone() -> None:
    conf = binpack_conf(10)
    plugins = conf["tiers"][1]["plugins"]
    assert plugins[-1] == {"name": "binpack", "arguments": {"binpack.weight": 10}}
    assert plugins[:-1] == scheduler_conf()["tiers"][1]["plugins"][:-1]
    assert conf["actions"] == scheduler_conf()["actions"]
