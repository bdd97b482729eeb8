"""What the Volcano scenarios read about a gang: its pods' allocations, and that it stays unbound."""

from __future__ import annotations

import time

from e2e.harness.kube import Json, allocated_results, get_claim, get_pod
from e2e.harness.testbed import SimCluster


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


def gang_waits(bed: SimCluster, ns: str, names: list[str], *, seconds: float) -> None:
    """For `seconds`: no gang pod bound, no gang claim allocated (Volcano's cycle is 1 s)."""
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        for name in names:
            pod = get_pod(bed.api, ns, name)
            assert pod is not None
            assert not pod["spec"].get("nodeName"), f"{name} was bound to {pod['spec'].get('nodeName')}"
            assert claim_result(bed, ns, pod) is None, f"{name}'s claim was allocated"
        time.sleep(0.5)
