"""A claim's Warning Event (kubelet_plugin/node/claim_events.py, what the paging watch posts as
`MostlyPaging`) reaches a real API server where the claim's owner looks: on the ResourceClaim and on the pod
it is reserved for; a claim re-created under the same name (another UID) gets none."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from kubelet_plugin.node.claim_events import ClaimEvents
from kubelet_plugin.observability.paging_watch import MOSTLY_PAGING_REASON

pytestmark = pytest.mark.e2e


CLAIM = {
    "metadata": {"name": "llm"},
    "spec": {"devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "vgpu.tessera.dev"}}]}},
}
POD = {
    "metadata": {"name": "llm-0"},
    "spec": {
        "containers": [{"name": "c", "image": "none", "resources": {"claims": [{"name": "gpu"}]}}],
        "resourceClaims": [{"name": "gpu", "resourceClaimName": "llm"}],
    },
}


def _claim_and_pod(api: k8s.ApiClient, ns: str) -> tuple[str, str]:
    """A claim allocated (to a device of no node) and reserved for a pending pod that uses it: their UIDs."""
    resource, core = k8s.ResourceV1Api(api), k8s.CoreV1Api(api)
    claim = resource.create_namespaced_resource_claim(ns, k8s.ResourceV1ResourceClaim.model_validate(CLAIM))
    pod = core.create_namespaced_pod(ns, k8s.V1Pod.model_validate(POD))
    assert claim.metadata is not None and pod.metadata is not None
    result = {"request": "gpu", "driver": "gpu.tessera.dev", "pool": "n", "device": "gpu-0-vgpu"}
    status = {
        "allocation": {"devices": {"results": [result]}},
        "reservedFor": [{"resource": "pods", "name": "llm-0", "uid": pod.metadata.uid}],
    }
    resource.patch_namespaced_resource_claim_status(
        "llm", ns, {"status": status}, _content_type="application/merge-patch+json"
    )
    return str(claim.metadata.uid), str(pod.metadata.uid)


def _events(api: k8s.ApiClient, ns: str) -> list[Any]:
    found = k8s.CoreV1Api(api).list_namespaced_event(ns, field_selector=f"reason={MOSTLY_PAGING_REASON}")
    return list(found.items or [])


def test_the_event_is_on_the_claim_and_its_pod(k8s_api: k8s.ApiClient, e2e_namespace: str) -> None:
    claim, pod = _claim_and_pod(k8s_api, e2e_namespace)
    events = ClaimEvents(api=k8s_api, node_name="node-a")
    written = events.warn(
        namespace=e2e_namespace,
        name="llm",
        uid=claim,
        reason=MOSTLY_PAGING_REASON,
        message="pages",
    )
    assert written == 2
    got = {
        (e.involved_object.kind, e.involved_object.name, e.involved_object.uid)
        for e in _events(k8s_api, e2e_namespace)
    }
    assert got == {("ResourceClaim", "llm", claim), ("Pod", "llm-0", pod)}
    assert all(e.type == "Warning" and e.message == "pages" for e in _events(k8s_api, e2e_namespace))


def test_a_claim_of_another_uid_gets_none(k8s_api: k8s.ApiClient, e2e_namespace: str) -> None:
    _claim_and_pod(k8s_api, e2e_namespace)
    events = ClaimEvents(api=k8s_api, node_name="node-a")
    assert (
        events.warn(namespace=e2e_namespace, name="llm", uid="0000", reason=MOSTLY_PAGING_REASON, message="x")
        == 0
    )
    assert (
        events.warn(
            namespace=e2e_namespace, name="gone", uid="0000", reason=MOSTLY_PAGING_REASON, message="x"
        )
        == 0
    )
    assert _events(k8s_api, e2e_namespace) == []
