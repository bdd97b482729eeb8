"""`numaNodeForm: list` on the real control plane (docs/topology.md).

With DRAListTypeAttributes on for every component, the stored ResourceSlices keep the list-valued
`resource.kubernetes.io/numaNode` and kube-scheduler matches it: 2 whole GPUs under `matchAttribute` share one
NUMA node of the 8 x H100 node (two NUMA nodes). Without the gate (the release's default) the API server
drops the list and refuses the emptied attribute: the publisher then publishes numaNode as an int and says
why in a Warning Event on the Node.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from dra_driver.core.cluster_features import LIST_TYPE_ATTRIBUTES
from dra_driver.core.families.published import NumaForm
from dra_driver.core.settings import NodeSettings
from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.names import DRIVER_NAME, NUMA_NODE_ATTRIBUTE
from e2e.benches.pods import pod as bench_pod
from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.nodes import create_node, delete_node
from e2e.controlplane.pytest_fixture import private_control_plane
from e2e.harness.examples import device_classes
from e2e.harness.published_node import NODES_DIR, published_node, slices_for
from e2e.harness.server_apply import ServerApply
from e2e.harness.verdicts import scheduler_verdict
from kubelet_plugin.node.events import EVENT_NAMESPACE, NodeEvents
from kubelet_plugin.publish.publisher import NUMA_LIST_DROPPED_REASON, SlicePublisher

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

NODE_FILE = NODES_DIR / "h100x8.yaml"


def listed(node: str) -> NodeSettings:
    return NodeSettings(node_name=node, numa_node_form=NumaForm.LIST)


def stored_numa(api: k8s.ApiClient, node: str) -> dict[str, Any]:
    """Device name → numaNode as the API server stored it (wire form: a dropped field stays dropped)."""
    listed_slices = k8s.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node},spec.driver={DRIVER_NAME}"
    )
    items: list[dict[str, Any]] = api.sanitize_for_serialization(listed_slices.items or [])  # type: ignore[no-untyped-call]
    return {
        d["name"]: d["attributes"].get(NUMA_NODE_ATTRIBUTE)
        for s in items
        for d in s["spec"].get("devices") or []
    }


def numa_events(api: k8s.ApiClient, node: str) -> list[k8s.CoreV1Event]:
    listed_events = k8s.CoreV1Api(api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={node},reason={NUMA_LIST_DROPPED_REASON}"
    )
    return list(listed_events.items or [])


# -- the gate on ---------------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def list_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with private_control_plane(
        tmp_path_factory.mktemp("controlplane-list"), feature_gates={LIST_TYPE_ATTRIBUTES: True}
    ) as plane:
        yield plane


@pytest.fixture(scope="module")
def list_api(list_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    with list_plane.api_client() as client:
        yield client


def test_the_list_is_kept_and_aligns_two_gpus_on_one_numa_node(
    list_plane: ControlPlane, list_api: k8s.ApiClient
) -> None:
    assert list_plane.feature_gates.get(LIST_TYPE_ATTRIBUTES) is True
    ServerApply(list_api).apply(device_classes())
    core = k8s.CoreV1Api(list_api)
    namespace = "default"
    node = f"numa-list-{uuid.uuid4().hex[:6]}"
    with published_node(list_api, node_file=NODE_FILE, name=node, settings=listed(node)):
        numa = stored_numa(list_api, node)
        assert numa["gpu-0"] == {"ints": [0]} and numa["gpu-7"] == {"ints": [1]}
        assert all(v is not None and "ints" in v for v in numa.values())
        claim = {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": "two-on-one-numa", "namespace": namespace},
            "spec": {
                "devices": {
                    "requests": [{"name": "gpus", "exactly": {"deviceClassName": DRIVER_NAME, "count": 2}}],
                    "constraints": [{"requests": ["gpus"], "matchAttribute": NUMA_NODE_ATTRIBUTE}],
                }
            },
        }
        resource = k8s.ResourceV1Api(list_api)
        resource.create_namespaced_resource_claim(
            namespace, k8s.ResourceV1ResourceClaim.model_validate(claim)
        )
        body = bench_pod("numa", claim="two-on-one-numa", node_selector={"kubernetes.io/hostname": node})
        core.create_namespaced_pod(namespace, k8s.V1Pod.model_validate(body))
        try:
            verdict = scheduler_verdict(
                list_api, namespace, "numa", claim_name=lambda _pod: "two-on-one-numa"
            )
            assert verdict.bound, verdict.message
            gpus = sorted(str(r["device"]) for r in verdict.results)
            assert len(gpus) == 2 and all(g.startswith("gpu-") for g in gpus), gpus
            # Each GPU's list is its own node alone on this board: matching lists means one NUMA node.
            assert numa[gpus[0]] == numa[gpus[1]], (gpus, numa)
        finally:
            core.delete_namespaced_pod("numa", namespace, grace_period_seconds=0)
            resource.delete_namespaced_resource_claim("two-on-one-numa", namespace)


# -- the gate off (the session's plane: the release's default gates) -----------------------------------------


def test_without_the_gate_numa_node_is_an_int_and_the_node_is_told(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient
) -> None:
    if control_plane.feature_gates.get(LIST_TYPE_ATTRIBUTES):
        pytest.skip(f"the session's control plane runs with {LIST_TYPE_ATTRIBUTES} on")
    node = f"numa-nogate-{uuid.uuid4().hex[:6]}"
    create_node(k8s_api, name=node)
    events = NodeEvents(rest=RestCalls(k8s_api), node_name=node)
    publisher = SlicePublisher(api=k8s.ResourceV1Api(k8s_api), node_name=node, events=events)
    try:
        publisher.publish(list(slices_for(NODE_FILE, node_name=node, settings=listed(node))))
        assert publisher.numa_scalar
        numa = stored_numa(k8s_api, node)
        # Exactly what the default (scalar) setting publishes: alignment on numaNode keeps working.
        scalar = slices_for(NODE_FILE, node_name=node)
        want = {
            d["name"]: d["attributes"][NUMA_NODE_ATTRIBUTE]
            for s in scalar
            for d in s["spec"].get("devices") or []
        }
        assert numa == want and numa["gpu-0"] == {"int": 0} and numa["gpu-7"] == {"int": 1}
        (event,) = numa_events(k8s_api, node)
        message = str(event.message)
        assert event.type == "Warning"
        for needed in (LIST_TYPE_ATTRIBUTES, "kube-apiserver", "kube-scheduler", "kube-controller-manager"):
            assert needed in message, message
        assert "published as an int" in message
        # Later publications stay scalar without asking again, and without another Event.
        publisher.publish(list(slices_for(NODE_FILE, node_name=node, settings=listed(node))))
        assert stored_numa(k8s_api, node) == want
        assert len(numa_events(k8s_api, node)) == 1
    finally:
        try:
            publisher.publish([])
        finally:
            delete_node(k8s_api, name=node)
