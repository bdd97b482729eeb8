"""Every shipped manifest is accepted by the real API server; the opaque-config policy rejects bad configs."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes import dynamic
from kubernetes.client.exceptions import ApiException

pytestmark = pytest.mark.e2e

ROOT = Path(__file__).resolve().parents[3]
MANIFEST_DIRS = [ROOT / "deviceclasses", ROOT / "deploy" / "manifests", ROOT / "deploy" / "examples"]
MANIFESTS = sorted(p for d in MANIFEST_DIRS if d.is_dir() for p in d.glob("*.yaml"))
POLICY = ROOT / "deviceclasses" / "opaque-config-policy.yaml"


def documents(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def resource(dyn: dynamic.DynamicClient, obj: dict[str, Any]) -> Any:
    return dyn.resources.get(api_version=obj["apiVersion"], kind=obj["kind"])


def ensure_namespace(api: k8s.ApiClient, name: str) -> None:
    try:
        k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": name}}))
    except ApiException as e:
        if e.status != 409:
            raise


@pytest.fixture(scope="module")
def dyn(k8s_api: k8s.ApiClient) -> dynamic.DynamicClient:
    return dynamic.DynamicClient(k8s_api)  # type: ignore[no-untyped-call]


@pytest.mark.parametrize("path", MANIFESTS, ids=lambda p: str(p.relative_to(ROOT)))
def test_server_side_dry_run_accepts(path: Path, dyn: dynamic.DynamicClient, k8s_api: k8s.ApiClient) -> None:
    for obj in documents(path):
        ns = obj.get("metadata", {}).get("namespace")
        if obj["kind"] == "Namespace":
            continue
        if ns:
            ensure_namespace(k8s_api, ns)
        res = resource(dyn, obj)
        kwargs: dict[str, Any] = {"body": obj, "query_params": [("dryRun", "All")]}
        if res.namespaced:
            kwargs["namespace"] = ns or "default"
        try:
            res.create(**kwargs)
        except ApiException as e:
            if e.status != 409:  # already there from an earlier test is fine
                raise AssertionError(f"{path.name}: {obj['kind']} {obj['metadata']['name']}: {e.body}") from e


def claim(parameters: Any, *, driver: str = "gpu.tessera.dev") -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"generateName": "policy-"},
        "spec": {
            "devices": {
                "requests": [{"name": "gpu", "exactly": {"deviceClassName": "vgpu.tessera.dev"}}],
                "config": [{"requests": ["gpu"], "opaque": {"driver": driver, "parameters": parameters}}],
            }
        },
    }


V1 = "resource.tessera.dev/v1"
BAD = [
    (
        {"apiVersion": "resource.tessera.dev/v2", "kind": "VgpuConfig"},
        "parameters.apiVersion: unknown apiVersion",
    ),
    ({"apiVersion": V1, "kind": "TpuConfig"}, 'parameters.kind: unknown kind "TpuConfig"'),
    (
        {"apiVersion": V1, "kind": "VgpuConfig", "memory": "80Gi"},
        "parameters.memory: unknown field in VgpuConfig",
    ),
    (
        {"apiVersion": V1, "kind": "GpuConfig", "priority": 0},
        "parameters.priority: unknown field in GpuConfig",
    ),
    (
        {"apiVersion": V1, "kind": "VgpuConfig", "smLimitPolicy": "fast"},
        "parameters.smLimitPolicy: must be one of",
    ),
    (
        {"apiVersion": V1, "kind": "VgpuConfig", "priority": 2},
        "parameters.priority: must be an integer from 0 to 1",
    ),
    (
        {"apiVersion": V1, "kind": "VgpuConfig", "priority": "0"},
        "parameters.priority: must be an integer from 0 to 1",
    ),
    (
        {"apiVersion": V1, "kind": "VgpuConfig", "logLevel": 5},
        "parameters.logLevel: must be an integer from 0 to 4",
    ),
    (
        {"apiVersion": V1, "kind": "VgpuConfig", "logLevel": -1},
        "parameters.logLevel: must be an integer from 0",
    ),
]
GOOD: list[dict[str, Any]] = [
    {"apiVersion": V1, "kind": "VgpuConfig"},
    {"apiVersion": V1, "kind": "VgpuConfig", "smLimitPolicy": "force", "priority": 1, "logLevel": 4},
    {"apiVersion": V1, "kind": "GpuConfig"},
    {"apiVersion": V1, "kind": "MigConfig"},
]


@pytest.fixture(scope="module")
def policy(dyn: dynamic.DynamicClient, k8s_api: k8s.ApiClient) -> str:
    """Install the policy for real and wait until the API server enforces it."""
    for obj in documents(POLICY):
        try:
            resource(dyn, obj).create(body=obj)
        except ApiException as e:
            if e.status != 409:
                raise
    ensure_namespace(k8s_api, "policy-test")
    probe = claim({"apiVersion": V1, "kind": "NoSuchKind"})
    deadline = time.monotonic() + 30
    while time.monotonic() < deadline:
        try:
            resource(dyn, probe).create(body=probe, namespace="policy-test", query_params=[("dryRun", "All")])
        except ApiException as e:
            if e.status == 422 and "unknown kind" in str(e.body):
                return "policy-test"
            raise
        time.sleep(0.5)
    raise AssertionError("the opaque-config policy was not enforced within 30 s")


@pytest.mark.parametrize(("parameters", "message"), BAD, ids=[m.split(":")[0] for _, m in BAD])
def test_policy_rejects_bad_configs_naming_the_field(
    parameters: dict[str, Any], message: str, policy: str, dyn: dynamic.DynamicClient
) -> None:
    body = claim(parameters)
    with pytest.raises(ApiException) as caught:
        resource(dyn, body).create(body=body, namespace=policy, query_params=[("dryRun", "All")])
    assert caught.value.status == 422
    text = json.loads(caught.value.body or "{}")["message"]
    assert message in text
    assert "spec.devices.config[].opaque.parameters." in text


def test_policy_checks_claim_templates_too(policy: str, dyn: dynamic.DynamicClient) -> None:
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"generateName": "policy-"},
        "spec": {"spec": claim({"apiVersion": V1, "kind": "VgpuConfig", "logLevel": 9})["spec"]},
    }
    with pytest.raises(ApiException) as caught:
        resource(dyn, template).create(body=template, namespace=policy, query_params=[("dryRun", "All")])
    assert (
        "spec.spec.devices.config[].opaque.parameters.logLevel"
        in json.loads(caught.value.body or "{}")["message"]
    )


@pytest.mark.parametrize("parameters", GOOD, ids=[str(sorted(p.items())) for p in GOOD])
def test_policy_admits_good_configs_and_other_drivers(
    parameters: dict[str, Any], policy: str, dyn: dynamic.DynamicClient
) -> None:
    for body in (claim(parameters), claim({"anything": "goes"}, driver="gpu.example.com")):
        resource(dyn, body).create(body=body, namespace=policy, query_params=[("dryRun", "All")])


@pytest.mark.parametrize(
    ("field", "message"),
    [
        ({"priority": 0}, "parameters.priority: 0 (high priority) holds the GPU's other claims back"),
        ({"smLimitPolicy": "disable"}, "parameters.smLimitPolicy: disable switches the claim's SM limit off"),
    ],
)
def test_policy_leaves_high_priority_and_no_limit_to_device_classes(
    field: dict[str, Any], message: str, policy: str, dyn: dynamic.DynamicClient
) -> None:
    parameters = {"apiVersion": V1, "kind": "VgpuConfig", **field}
    body = claim(parameters)
    with pytest.raises(ApiException) as caught:
        resource(dyn, body).create(body=body, namespace=policy, query_params=[("dryRun", "All")])
    assert caught.value.status == 403
    assert message in json.loads(caught.value.body or "{}")["message"]
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"generateName": "vgpu-high-"},
        "spec": {"config": [{"opaque": {"driver": "gpu.tessera.dev", "parameters": parameters}}]},
    }
    resource(dyn, device_class).create(body=device_class, query_params=[("dryRun", "All")])
