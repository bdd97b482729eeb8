"""Smoke test of the real control plane: the DRA feature gates are on and kube-scheduler allocates devices."""

from __future__ import annotations

import functools
import json
import re
import subprocess
import time
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.controlplane import K8S_VERSION, settings
from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import NodeFactory

pytestmark = pytest.mark.e2e

DRIVER = "test.example.com"


def wait_for(what: str, probe: Callable[[], Any], *, timeout_s: float = 60.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        value = probe()
        if value:
            return value
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out after {timeout_s}s waiting for {what}")
        time.sleep(0.2)


def raw(response: Any) -> dict[str, Any]:
    """The object as the server sent it: a field the server dropped cannot be filled in by a model."""
    document: dict[str, Any] = json.loads(response.data)
    return document


@pytest.fixture
def dra_objects(k8s_api: k8s.ApiClient, node_factory: NodeFactory) -> Iterator[dict[str, str]]:
    """A node with a pool of two slices: shared counters in one; two plain devices, a counter-consuming
    partition and a multi-allocatable device with consumable memory in the other."""
    suffix = uuid.uuid4().hex[:6]
    node = f"node-{suffix}"
    node_factory(node, labels={"tessera.dev/e2e": "true"})
    resource = k8s.ResourceV1Api(k8s_api)
    device_class = f"test-class-{suffix}"
    resource.create_device_class(
        k8s.V1DeviceClass.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "DeviceClass",
                "metadata": {"name": device_class},
                "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
            }
        )
    )
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    counters_slice = f"{node}-counters"
    devices_slice = f"{node}-devices"
    resource.create_resource_slice(
        k8s.V1ResourceSlice.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": counters_slice},
                "spec": {
                    "driver": DRIVER,
                    "pool": pool,
                    "nodeName": node,
                    "sharedCounters": [
                        {"name": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}},
                    ],
                },
            }
        )
    )
    kind_attr = f"{DRIVER}/kind"
    resource.create_resource_slice(
        k8s.V1ResourceSlice.model_validate(
            {
                "apiVersion": "resource.k8s.io/v1",
                "kind": "ResourceSlice",
                "metadata": {"name": devices_slice},
                "spec": {
                    "driver": DRIVER,
                    "pool": pool,
                    "nodeName": node,
                    "devices": [
                        {
                            "name": "dev-0",
                            "attributes": {
                                kind_attr: {"string": "plain"},
                            },
                        },
                        {"name": "dev-1", "attributes": {kind_attr: {"string": "plain"}}},
                        {
                            "name": "gpu-0-part",
                            "attributes": {kind_attr: {"string": "partition"}},
                            "consumesCounters": [
                                {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "20Gi"}}}
                            ],
                        },
                        {
                            "name": "shared-0",
                            "attributes": {kind_attr: {"string": "shared"}},
                            "allowMultipleAllocations": True,
                            "capacity": {
                                "memory": {
                                    "value": "40Gi",
                                    "requestPolicy": {
                                        "default": "1Gi",
                                        "validRange": {"min": "1Gi", "step": "1Gi"},
                                    },
                                }
                            },
                        },
                    ],
                },
            }
        )
    )
    try:
        yield {
            "node": node,
            "class": device_class,
            "counters_slice": counters_slice,
            "devices_slice": devices_slice,
        }
    finally:
        resource.delete_resource_slice(counters_slice)
        resource.delete_resource_slice(devices_slice)
        resource.delete_device_class(device_class)


def claim_body(name: str, device_class: str, requests: list[dict[str, Any]]) -> k8s.ResourceV1ResourceClaim:
    return k8s.ResourceV1ResourceClaim.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name},
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": request["name"],
                            "exactly": {"deviceClassName": device_class, **request["exactly"]},
                        }
                        for request in requests
                    ]
                }
            },
        }
    )


def by_kind(kind: str) -> dict[str, Any]:
    return {"selectors": [{"cel": {"expression": f'device.attributes["{DRIVER}"].kind == "{kind}"'}}]}


def pod_body(name: str, claim: str) -> k8s.V1Pod:
    return k8s.V1Pod.model_validate(
        {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": name},
            "spec": {
                "containers": [
                    {
                        "name": "main",
                        "image": "registry.invalid/never-pulled:0",
                        "resources": {"claims": [{"name": "devices"}]},
                    }
                ],
                "resourceClaims": [{"name": "devices", "resourceClaimName": claim}],
                "terminationGracePeriodSeconds": 0,
            },
        }
    )


def read_claim(api: k8s.ApiClient, namespace: str, name: str) -> dict[str, Any]:
    return raw(k8s.ResourceV1Api(api).read_namespaced_resource_claim(name, namespace, _preload_content=False))


def test_apiserver_reports_the_built_version(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> None:
    info = k8s.VersionApi(k8s_api).get_code()
    assert info.git_version == K8S_VERSION


def test_feature_gated_slice_fields_survive(k8s_api: k8s.ApiClient, dra_objects: dict[str, str]) -> None:
    resource = k8s.ResourceV1Api(k8s_api)
    counters = raw(resource.read_resource_slice(dra_objects["counters_slice"], _preload_content=False))
    # With DRAPartitionableDevices off the server drops sharedCounters and rejects the then-empty slice.
    assert counters["spec"]["sharedCounters"] == [
        {"name": "gpu-0-counters", "counters": {"memory": {"value": "40Gi"}}}
    ]
    devices = {
        d["name"]: d
        for d in raw(resource.read_resource_slice(dra_objects["devices_slice"], _preload_content=False))[
            "spec"
        ]["devices"]
    }
    assert devices["gpu-0-part"]["consumesCounters"] == [
        {"counterSet": "gpu-0-counters", "counters": {"memory": {"value": "20Gi"}}}
    ]
    # DRAConsumableCapacity: without it both fields would be silently dropped.
    assert devices["shared-0"]["allowMultipleAllocations"] is True
    assert devices["shared-0"]["capacity"]["memory"]["requestPolicy"] == {
        "default": "1Gi",
        "validRange": {"min": "1Gi", "step": "1Gi"},
    }


def test_scheduler_binds_pod_and_allocates_devices(
    k8s_api: k8s.ApiClient, dra_objects: dict[str, str], e2e_namespace: str
) -> None:
    core = k8s.CoreV1Api(k8s_api)
    resource = k8s.ResourceV1Api(k8s_api)
    device_class, node = dra_objects["class"], dra_objects["node"]
    resource.create_namespaced_resource_claim(
        e2e_namespace,
        claim_body(
            "claim-a",
            device_class,
            [
                {"name": "whole", "exactly": by_kind("plain")},
                {"name": "part", "exactly": by_kind("partition")},
                {
                    "name": "slice",
                    "exactly": {**by_kind("shared"), "capacity": {"requests": {"memory": "4Gi"}}},
                },
            ],
        ),
    )
    resource.create_namespaced_resource_claim(
        e2e_namespace,
        claim_body(
            "claim-b",
            device_class,
            [
                {
                    "name": "slice",
                    "exactly": {**by_kind("shared"), "capacity": {"requests": {"memory": "8Gi"}}},
                },
            ],
        ),
    )
    core.create_namespaced_pod(e2e_namespace, pod_body("pod-a", "claim-a"))
    core.create_namespaced_pod(e2e_namespace, pod_body("pod-b", "claim-b"))

    def node_of(pod: str) -> str | None:
        spec = core.read_namespaced_pod(pod, e2e_namespace).spec
        return spec.node_name if spec else None

    for pod in ("pod-a", "pod-b"):
        assert wait_for(f"{pod} bound", functools.partial(node_of, pod)) == node

    claim_a = read_claim(k8s_api, e2e_namespace, "claim-a")
    results = {r["request"]: r for r in claim_a["status"]["allocation"]["devices"]["results"]}
    assert results["whole"]["device"] in {"dev-0", "dev-1"}
    assert results["part"]["device"] == "gpu-0-part"
    assert results["slice"]["device"] == "shared-0"
    assert {r["driver"] for r in results.values()} == {DRIVER}
    assert {r["pool"] for r in results.values()} == {node}
    assert results["slice"]["consumedCapacity"] == {"memory": "4Gi"}
    assert [ref["name"] for ref in claim_a["status"]["reservedFor"]] == ["pod-a"]

    # The same multi-allocatable device serves a second claim, each allocation with its own share.
    claim_b = read_claim(k8s_api, e2e_namespace, "claim-b")
    (result_b,) = claim_b["status"]["allocation"]["devices"]["results"]
    assert result_b["device"] == "shared-0"
    assert result_b["consumedCapacity"] == {"memory": "8Gi"}
    assert result_b["shareID"] and result_b["shareID"] != results["slice"]["shareID"]

    # kube-controller-manager's resourceclaim controller releases the claim once its pod is gone.
    core.delete_namespaced_pod("pod-a", e2e_namespace, grace_period_seconds=0)

    def released() -> bool:
        status = read_claim(k8s_api, e2e_namespace, "claim-a").get("status", {})
        return not status.get("reservedFor") and "allocation" not in status

    wait_for("claim-a released by the resourceclaim controller", released)


def test_node_is_ready_and_untainted(k8s_api: k8s.ApiClient, node_factory: NodeFactory) -> None:
    name = f"node-{uuid.uuid4().hex[:6]}"
    node_factory(name, labels={"example.com/role": "gpu"})
    node = raw(k8s.CoreV1Api(k8s_api).read_node(name, _preload_content=False))
    assert node["metadata"]["labels"]["example.com/role"] == "gpu"
    assert "taints" not in node["spec"]
    ready = [c for c in node["status"]["conditions"] if c["type"] == "Ready"]
    assert ready and ready[0]["status"] == "True"
    assert node["status"]["allocatable"]["pods"] == "110"


def test_unknown_claim_request_is_rejected(k8s_api: k8s.ApiClient, e2e_namespace: str) -> None:
    # Guards the smoke test itself: the server validates claims, so the bodies above are really checked.
    with pytest.raises(ApiException) as info:
        k8s.ResourceV1Api(k8s_api).create_namespaced_resource_claim(
            e2e_namespace, claim_body("bad", "no-such-class", [{"name": "Not_A_DNS_Label", "exactly": {}}])
        )
    assert info.value.status == 422


def test_the_release_table_matches_the_binaries(control_plane: ControlPlane) -> None:
    """Every gate e2e/controlplane/releases.py lists for this release, with its default, as the binary's own
    --help prints it (`Gate=true|false (BETA - default=true)`; GA gates are listed or locked on)."""
    shown = subprocess.run(
        [str(control_plane.binaries.kube_apiserver), "--help"], capture_output=True, text=True, check=True
    ).stdout
    for gate, default in settings.RELEASE.defaults.items():
        match = re.search(rf"\b{gate}=true\|false \((\w+) - default=(true|false)\)", shown)
        if match is None:  # a GA gate locked on is no longer listed
            assert default, f"{gate} is not in kube-apiserver --help, yet the table says default off"
            continue
        assert (match.group(2) == "true") == default, f"{gate}: the binary's default is {match.group(2)}"
