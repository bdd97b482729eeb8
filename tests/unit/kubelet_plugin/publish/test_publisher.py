"""The publisher's logic that needs no API server; its API behaviour is tested in
e2e/scenarios/controlplane."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from dra_driver.vocabulary.errors import PublishError
from kubelet_plugin.publish.publisher import PublishResult, SlicePublisher


def publisher() -> SlicePublisher:
    # Points at nothing: every test here must finish before any request is made.
    api = k8s.ResourceV1Api(k8s.ApiClient(k8s.Configuration(host="http://127.0.0.1:9")))
    return SlicePublisher(api=api, node_name="node-a")


def test_result_counts_writes_and_degradation() -> None:
    r = PublishResult(generation=3, created=1, updated=2, deleted=1)
    assert r.writes == 4 and not r.degraded
    assert PublishResult(generation=1, dropped=("s: spec.sharedCounters",)).degraded


def test_field_selector_names_node_and_driver() -> None:
    assert publisher().field_selector == "spec.nodeName=node-a,spec.driver=gpu.tessera.dev"


def test_slices_for_another_node_are_refused_before_any_request() -> None:
    foreign = {
        "metadata": {"name": "node-b-gpu.tessera.dev-0"},
        "spec": {"driver": "gpu.tessera.dev", "nodeName": "node-b", "pool": {"name": "node-b"}},
    }
    with pytest.raises(PublishError, match="not for node node-a"):
        publisher().publish([foreign])


def test_own_writes_are_not_foreign() -> None:
    p = publisher()
    p._written["s-0"] = "17"
    assert not p._foreign(
        {"type": "MODIFIED", "object": {"metadata": {"name": "s-0", "resourceVersion": "17"}}}
    )
    assert p._foreign({"type": "MODIFIED", "object": {"metadata": {"name": "s-0", "resourceVersion": "18"}}})
    assert p._foreign({"type": "DELETED", "object": {"metadata": {"name": "s-0", "resourceVersion": "19"}}})
    assert p._foreign({"type": "ADDED", "object": {"metadata": {"name": "s-9", "resourceVersion": "20"}}})
