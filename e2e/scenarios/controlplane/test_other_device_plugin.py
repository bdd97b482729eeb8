"""Another GPU device plugin on a node, against the real API server: the node plugin's guard reads the
Node's capacity as the kubelet writes it, blocks publishing while `nvidia.com/gpu` is advertised, and says so
in a Warning Event on the Node; when the resource goes, a Normal Event, and publishing resumes."""

from __future__ import annotations

from typing import Any

import pytest
from kubernetes import client as k8s

from dra_driver.core.foreign_plugins import REFUSED_REASON
from dra_driver.io.rest_calls import RestCalls
from kubelet_plugin.node.events import EVENT_NAMESPACE, NodeEvents
from kubelet_plugin.node.foreign_plugin import ForeignPluginGuard

pytestmark = pytest.mark.e2e

NODE = "other-device-plugin"


def _set_capacity(api: k8s.ApiClient, resource: str, value: str) -> None:
    core = k8s.CoreV1Api(api)
    status = core.read_node(NODE).status
    assert status is not None and status.capacity is not None
    capacity = {**status.capacity, resource: value}
    body = {"status": {"capacity": capacity, "allocatable": capacity}}
    core.patch_node_status(NODE, body)


def _events(api: k8s.ApiClient) -> list[tuple[str, str, str]]:
    listed = k8s.CoreV1Api(api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={NODE},reason={REFUSED_REASON}"
    )
    return [(str(e.type), str(e.reason), str(e.message)) for e in listed.items]


def test_guard_follows_the_nodes_capacity(k8s_api: k8s.ApiClient, node_factory: Any) -> None:
    node_factory(NODE)
    guard = ForeignPluginGuard(
        rest=RestCalls(k8s_api),
        node_name=NODE,
        split=False,
        events=NodeEvents(rest=RestCalls(k8s_api), node_name=NODE),
    )
    assert not guard.check() and not guard.blocked
    _set_capacity(k8s_api, "nvidia.com/gpu", "8")
    assert guard.check() and guard.blocked
    ((kind, _, message),) = _events(k8s_api)
    assert kind == "Warning" and "advertises nvidia.com/gpu" in message
    # the kubelet keeps a removed device plugin's resource, at 0
    _set_capacity(k8s_api, "nvidia.com/gpu", "0")
    assert guard.check() and not guard.blocked
    assert sorted(k for k, _, _ in _events(k8s_api)) == ["Normal", "Warning"]
