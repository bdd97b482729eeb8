"""The harness's apply (e2e/harness/server_apply.py) against the real API server: it puts objects where
`kubectl apply` puts them, applies again over a change, and fails as kubectl does, naming the object and the
API server's reason."""

from __future__ import annotations

import uuid
from typing import Any

import pytest
from kubernetes import client as k8s

from dra_driver.io.rest_calls import RestCalls
from e2e.controlplane.launcher import ControlPlane
from e2e.harness.kube import Json, Kubectl
from e2e.harness.server_apply import ServerApply
from e2e.kubelet_standin.errors import StandInError

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(120)]


def config_map(name: str, **data: str) -> Json:
    return {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": name}, "data": data}


def test_a_namespaced_object_lands_in_the_namespace_given_and_a_second_apply_replaces_its_fields(
    k8s_api: k8s.ApiClient, e2e_namespace: str
) -> None:
    target = ServerApply(k8s_api)
    [stored] = target.apply([config_map("settings", a="1", b="2")], namespace=e2e_namespace)
    assert stored["metadata"]["namespace"] == e2e_namespace and stored["data"] == {"a": "1", "b": "2"}
    target.apply([config_map("settings", a="3")], namespace=e2e_namespace)  # b is no longer applied
    read = k8s.CoreV1Api(k8s_api).read_namespaced_config_map("settings", e2e_namespace)
    assert read.data == {"a": "3"}


def test_a_cluster_scoped_kind_and_an_object_kubectl_made_first(
    k8s_api: k8s.ApiClient, control_plane: ControlPlane, e2e_namespace: str
) -> None:
    name = f"apply-{uuid.uuid4().hex[:6]}.example.com"
    device_class: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": name},
        "spec": {"selectors": [{"cel": {"expression": "true"}}]},
    }
    resource = k8s.ResourceV1Api(k8s_api)
    try:
        [stored] = ServerApply(k8s_api).apply([device_class], namespace=e2e_namespace)
        assert "namespace" not in stored["metadata"]
        assert (
            RestCalls(k8s_api).get(f"/apis/resource.k8s.io/v1/deviceclasses/{name}")["spec"]
            == device_class["spec"]
        )
    finally:
        resource.delete_device_class(name)
    # an object a user made with kubectl first: applied over without a conflict
    Kubectl(control_plane.binaries.kubectl, control_plane.kubeconfig).apply(
        [config_map("made", a="kubectl")], namespace=e2e_namespace
    )
    ServerApply(k8s_api).apply([config_map("made", a="harness")], namespace=e2e_namespace)
    assert k8s.CoreV1Api(k8s_api).read_namespaced_config_map("made", e2e_namespace).data == {"a": "harness"}


@pytest.mark.parametrize(
    ("document", "words"),
    [
        (config_map("Not_A_Name"), ["apply ConfigMap", "/Not_A_Name failed (422)", "metadata.name"]),
        ({**config_map("typo"), "dat": {"a": "1"}}, ["/typo failed", ".dat: field not declared in schema"]),
        ({**config_map("x"), "kind": "NoSuchKind"}, ["serves no kind NoSuchKind in v1"]),
        ({**config_map("x"), "apiVersion": "nothing.example.com/v1"}, ["serves no kind ConfigMap"]),
        ({"apiVersion": "v1", "kind": "ConfigMap", "metadata": {}}, ["needs apiVersion, kind and metadata"]),
    ],
)
def test_a_refused_object_names_itself_and_the_reason(
    k8s_api: k8s.ApiClient, e2e_namespace: str, document: dict[str, Any], words: list[str]
) -> None:
    with pytest.raises(StandInError) as refused:
        ServerApply(k8s_api).apply([document], namespace=e2e_namespace)
    assert all(w in str(refused.value) for w in words), str(refused.value)
    left = RestCalls(k8s_api).get(f"/api/v1/namespaces/{e2e_namespace}/configmaps")["items"]
    assert {c["metadata"]["name"] for c in left} <= {"kube-root-ca.crt"}  # nothing half applied
