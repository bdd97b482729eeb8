"""How the e2e cluster configures Volcano: the scheduler configuration of Volcano's DRA guide and the feature
gates a Volcano user passes, one place for the launcher, the docs' example and the tests."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any, Final

from e2e.controlplane.releases import RELEASES, Release

SCHEDULER_NAME: Final = "volcano"
ACTIONS: Final = ("enqueue", "allocate", "backfill")
# The predicates plugin wraps the upstream dynamicresources plugin only with this argument set.
DRA_ARGUMENT: Final = "predicate.DynamicResourceAllocationEnable"
# The Kubernetes release whose scheduler packages the snapshot vendors (k8s.io/kubernetes v1.36.1): its gate
# names are the ones vc-scheduler knows; an unknown gate is a start-up error.
VENDORED_RELEASE: Final[Release] = RELEASES["v1.36.3"]


def scheduler_conf() -> dict[str, Any]:
    """The configuration of docs/user-guide/how_to_enable_dra.md upstream: gang and priority first, then fair
    share, the filters (with DRA), queue proportions and scoring."""
    return {
        "actions": ", ".join(ACTIONS),
        "tiers": [
            {"plugins": [{"name": "priority"}, {"name": "gang"}]},
            {
                "plugins": [
                    {"name": "drf"},
                    {"name": "predicates", "arguments": {DRA_ARGUMENT: True}},
                    {"name": "proportion"},
                    {"name": "nodeorder"},
                    {"name": "binpack"},
                ]
            },
        ],
    }


# The capacity plugin's DRA queue quota (Volcano 1.15+): a queue's `capability` may name
# `deviceclass/<class>` (devices) and `<capacity>.deviceclass/<class>` (consumed capacity, e.g. memory).
CAPACITY_DRA_ARGUMENTS: Final = {
    "capacity.DynamicResourceAllocationEnable": True,
    "capacity.DRAConsumableCapacityEnable": True,
}


def capacity_conf() -> dict[str, Any]:
    """`scheduler_conf` with Volcano's `capacity` plugin in place of `proportion` (the two are alternatives):
    the queue quota that counts DRA devices and their consumed capacity."""
    conf = scheduler_conf()
    conf["tiers"][1]["plugins"] = [
        {"name": "capacity", "arguments": dict(CAPACITY_DRA_ARGUMENTS)} if p["name"] == "proportion" else p
        for p in conf["tiers"][1]["plugins"]
    ]
    return conf


def preempt_conf() -> dict[str, Any]:
    """`scheduler_conf` with the `preempt` action: a pod of a higher PriorityClass evicts lower ones of its
    queue. The gang plugin's veto is off: it keeps a job from dropping below minMember, which for the usual
    PodGroup of one pod (minMember 1) protects every pod."""
    conf = scheduler_conf()
    conf["actions"] = "enqueue, allocate, preempt, backfill"
    conf["tiers"][0]["plugins"] = [
        {**p, "enablePreemptable": False} if p["name"] == "gang" else p for p in conf["tiers"][0]["plugins"]
    ]
    return conf


def reclaim_conf() -> dict[str, Any]:
    """`scheduler_conf` with the `reclaim` action: a queue under its deserved share (`proportion`: weights
    over CPU, memory and extended resources) evicts pods of `reclaimable` queues over theirs. Gang's veto is
    left on: a victim's PodGroup of one pod gets no vote from it, so the decision falls to `proportion`
    (the next tier)."""
    conf = scheduler_conf()
    conf["actions"] = "enqueue, allocate, reclaim, backfill"
    return conf


BINPACK_WEIGHT: Final = "binpack.weight"


def binpack_conf(weight: int) -> dict[str, Any]:
    """`scheduler_conf` with `binpack` at `weight` (default 1): its CPU and memory packing then outweighs
    `nodeorder`'s least-requested spreading."""
    conf = scheduler_conf()
    conf["tiers"][1]["plugins"] = [
        {**p, "arguments": {BINPACK_WEIGHT: weight}} if p["name"] == "binpack" else p
        for p in conf["tiers"][1]["plugins"]
    ]
    return conf


def scheduler_gates(plane_gates: Mapping[str, bool], *, plane_release: Release) -> dict[str, bool]:
    """The gates vc-scheduler gets: every DRA gate that is on in the control plane (its release's defaults
    with the plane's own over them) and that the vendored release knows, as a user of that cluster turns on
    in Volcano what the cluster serves."""
    effective = plane_release.effective(plane_gates)
    on = {g: True for g, value in effective.items() if value and VENDORED_RELEASE.knows(g)}
    return {"DynamicResourceAllocation": True, **on}


def gates_flag(gates: Mapping[str, bool]) -> str:
    return "--feature-gates=" + ",".join(f"{g}={str(v).lower()}" for g, v in sorted(gates.items()))
