"""GPU faults → conditions: which XIDs count, the taint's effect, what latches and what recovers."""

from __future__ import annotations

from dataclasses import replace
from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.gpu_health import (
    APPLICATION_XIDS,
    Effect,
    HealthPolicy,
    conditions,
    describe,
    fault_from_xid,
)
from dra_driver.core.taints import device_taint, gpu_taints, inventory_taints, tainted, timestamp
from dra_driver.vocabulary.inventory import FaultKind, GpuFault, Inventory
from tests.support.inventories import make_gpu, make_inventory

LOST = GpuFault(FaultKind.LOST, xid=79)
DBE = GpuFault(FaultKind.XID, xid=48)


def with_faults(inv: Inventory, index: int, *faults: GpuFault) -> Inventory:
    gpus = tuple(replace(g, faults=faults) if g.index == index else g for g in inv.gpus)
    return replace(inv, gpus=gpus)


INV = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM"))
UUID1 = INV.gpus[1].uuid


def test_application_xids_are_not_device_faults_and_79_is_a_lost_gpu() -> None:
    assert all(fault_from_xid(x) is None for x in APPLICATION_XIDS)
    assert fault_from_xid(79) == LOST
    assert fault_from_xid(48) == DBE
    assert describe(LOST) == "XID 79 (GPU has fallen off the bus)"


@given(st.integers(min_value=0, max_value=1 << 16))
def test_every_other_xid_is_a_fault(xid: int) -> None:
    fault = fault_from_xid(xid)
    assert (fault is None) == (xid in APPLICATION_XIDS)


def test_a_lost_gpu_is_no_execute_anything_else_no_schedule_worst_first() -> None:
    got = conditions(with_faults(INV, 1, DBE, LOST), now=1000)
    sick = got[UUID1]
    assert sick.faults == (LOST, DBE) and sick.effect is Effect.NO_EXECUTE and sick.reason == "lost"
    assert sick.since == 1000 and "XID 48" in sick.message and "index 1" in sick.message
    assert got[INV.gpus[0].uuid].healthy
    only_dbe = conditions(with_faults(INV, 1, DBE), now=5)[UUID1]
    assert only_dbe.effect is Effect.NO_SCHEDULE and only_dbe.reason == "xid-48"


def test_fatal_xids_latch_unless_recovery_is_allowed_states_always_clear() -> None:
    sick = conditions(with_faults(INV, 1, DBE), now=10)
    later = conditions(INV, previous=sick, now=20)  # the backend no longer reports it
    assert later[UUID1].faults == (DBE,) and later[UUID1].since == 10
    assert conditions(INV, previous=sick, policy=HealthPolicy(recover_fatal_xids=True), now=20)[UUID1].healthy
    failing = conditions(with_faults(INV, 1, GpuFault(FaultKind.NVML_ERROR)), now=10)
    assert conditions(INV, previous=failing, now=20)[UUID1].healthy
    # a lost GPU found through XID 79 is an event too: it holds
    assert not conditions(INV, previous=conditions(with_faults(INV, 1, LOST), now=1), now=2)[UUID1].healthy


def test_a_reported_unhealthy_gpu_has_a_fault() -> None:
    inv = make_inventory(make_gpu(0, "L4", healthy=False))
    (cond,) = conditions(inv).values()
    assert cond.reason == "reported" and cond.effect is Effect.NO_SCHEDULE


def test_taints_are_stable_across_republishes_and_copied_onto_every_device() -> None:
    states = conditions(with_faults(INV, 1, LOST), now=1_700_000_000)
    taint = device_taint(states[UUID1])
    assert taint is not None
    assert taint == {
        "key": "gpu.tessera.dev/unhealthy",
        "value": "lost",
        "effect": "NoExecute",
        "timeAdded": "2023-11-14T22:13:20Z",
    }
    assert gpu_taints(conditions(with_faults(INV, 1, LOST), previous=states, now=1_800_000_000)) == {
        UUID1: (taint,)
    }
    assert timestamp(0) == "1970-01-01T00:00:00Z"
    devices: list[dict[str, Any]] = [
        {"name": "gpu-1"},
        {"name": "gpu-1-vgpu", "taints": [{"key": "other", "effect": "NoSchedule"}]},
    ]
    marked = tainted(devices, (taint,))
    assert marked[0]["taints"] == [taint] and len(marked[1]["taints"]) == 2
    assert "taints" not in devices[0], "the input is left alone"
    # the CLI's view: what the backend reports now, without a time
    assert inventory_taints(with_faults(INV, 1, LOST)) == {
        UUID1: ({"key": "gpu.tessera.dev/unhealthy", "value": "lost", "effect": "NoExecute"},)
    }
