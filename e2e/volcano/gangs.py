"""What the Volcano scenarios read about pods Volcano holds back (a gang, a queue at its capability): their
allocations, that they stay unbound, and Volcano's verdict on their PodGroup (its conditions)."""

from __future__ import annotations

import time

from kubernetes import client as k8s

from e2e.harness.kube import Json, allocated_results, get_claim, get_pod
from e2e.harness.testbed import SimCluster

GROUP, VERSION = "scheduling.volcano.sh", "v1beta1"


def claim_result(bed: SimCluster, ns: str, pod: Json) -> Json | None:
    """The allocation result of the pod's claim, or None while it has none."""
    for status in (pod.get("status") or {}).get("resourceClaimStatuses") or []:
        claim = get_claim(bed.api, ns, status.get("resourceClaimName") or "")
        found = allocated_results(claim) if claim else []
        if found:
            return found[0]
    return None


def bound_result(bed: SimCluster, ns: str, name: str) -> Json | None:
    """The pod's allocation once it is bound to a node and its claim allocated."""
    pod = get_pod(bed.api, ns, name)
    return claim_result(bed, ns, pod) if pod and pod["spec"].get("nodeName") else None


def bound(bed: SimCluster, ns: str, names: list[str]) -> list[str]:
    """Those of `names` bound to a node."""
    return [n for n in names if ((get_pod(bed.api, ns, n) or {}).get("spec") or {}).get("nodeName")]


def stays_unbound(bed: SimCluster, ns: str, names: list[str], *, seconds: float) -> None:
    """For `seconds`: none of `names` bound, none of their claims allocated (Volcano's cycle is 1 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in names:
            pod = get_pod(bed.api, ns, name)
            assert pod is not None
            assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec'].get('nodeName')}"
            assert claim_result(bed, ns, pod) is None, f"{name}'s claim was allocated"
        time.sleep(0.5)


def gang_waits(bed: SimCluster, ns: str, names: list[str], *, seconds: float) -> None:
    """For `seconds`: no gang pod bound, no gang claim allocated."""
    stays_unbound(bed, ns, names, seconds=seconds)


def read_podgroup(bed: SimCluster, ns: str, name: str) -> Json:
    group = k8s.CustomObjectsApi(bed.api).get_namespaced_custom_object(GROUP, VERSION, ns, "podgroups", name)
    assert isinstance(group, dict)
    return group


def podgroup_condition(bed: SimCluster, ns: str, name: str, kind: str, *, prefix: str = "") -> str | None:
    """The message of the PodGroup's condition `kind` (e.g. Volcano's gang verdict, "Unschedulable": "1/4
    tasks in gang unschedulable: …") while it is true and starts with `prefix`, else None."""
    for c in (read_podgroup(bed, ns, name).get("status") or {}).get("conditions") or []:
        message = str(c.get("message") or "")
        if c.get("type") == kind and c.get("status") == "True" and message.startswith(prefix):
            return message
    return None
