"""Memory oversubscription as the real kube-scheduler sees it (docs/gpu-sharing.md, "Oversubscription").

Two simulated 2 x H100 nodes publish what the plugin would: `oversub-*` with memoryOversubscription 2 (each
vgpu device: memory 81559Mi, virtualMemory 81559Mi), `plain-*` with the default (no virtualMemory). A claim of
the class vgpu-oversubscribed.tessera.dev asking 40Gi of memory and 60Gi of virtualMemory lands only on the
oversubscribed node, with the class's opt-in in its allocation; claims that did not opt in are placed against
`memory` alone, so beside it a GPU takes no more of them than its own memory holds.
"""

from __future__ import annotations

import uuid
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s

from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.vocabulary.names import DRIVER_NAME, Cap
from dra_driver.vocabulary.quantity import parse_quantity
from e2e.benches.pods import pod as bench_pod
from e2e.controlplane.launcher import ControlPlane
from e2e.harness.examples import device_classes
from e2e.harness.published_node import NODES_DIR, published_node
from e2e.harness.server_apply import ServerApply
from e2e.harness.verdicts import SchedulerVerdict, scheduler_verdict

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

NODE_FILE = NODES_DIR / "realnode-h100x2.yaml"
OPT_IN_CLASS = "vgpu-oversubscribed.tessera.dev"
GiB = 1 << 30


@pytest.fixture(scope="module")
def nodes(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> Iterator[tuple[str, str]]:
    ServerApply(k8s_api).apply(device_classes())
    tag = uuid.uuid4().hex[:6]
    over, plain = f"oversub-{tag}", f"plain-{tag}"
    doubled = NodeSettings(node_name=over, family=family_settings(memoryOversubscription=2))
    with (
        published_node(k8s_api, node_file=NODE_FILE, name=over, settings=doubled),
        published_node(k8s_api, node_file=NODE_FILE, name=plain),
    ):
        yield over, plain


def _schedule(
    api: k8s.ApiClient,
    ns: str,
    name: str,
    device_class: str,
    requests: dict[str, str],
    node: str | None = None,
) -> SchedulerVerdict:
    claim: dict[str, Any] = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": ns},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {"deviceClassName": device_class, "capacity": {"requests": requests}},
                    }
                ]
            }
        },
    }
    k8s.ResourceV1Api(api).create_namespaced_resource_claim(
        ns, k8s.ResourceV1ResourceClaim.model_validate(claim)
    )
    selector = {"kubernetes.io/hostname": node} if node else None
    body = bench_pod(name, claim=name, node_selector=selector)
    k8s.CoreV1Api(api).create_namespaced_pod(ns, k8s.V1Pod.model_validate(body))
    return scheduler_verdict(api, ns, name, claim_name=lambda _pod: name)


def _bytes(result: dict[str, Any], name: str) -> int:
    """What the result consumed of capacity `name` (0 when it lists none)."""
    return int(parse_quantity(str((result.get("consumedCapacity") or {}).get(name, "0"))).value)


def _allocation(api: k8s.ApiClient, ns: str, name: str) -> dict[str, Any]:
    claim = k8s.ResourceV1Api(api).read_namespaced_resource_claim(name, ns)
    status: dict[str, Any] = api.sanitize_for_serialization(claim)["status"]  # type: ignore[no-untyped-call]
    return dict(status["allocation"])


def test_only_an_opted_in_claim_gets_virtual_memory_and_the_others_keep_the_gpus_memory(
    nodes: tuple[str, str], k8s_api: k8s.ApiClient, e2e_namespace: str
) -> None:
    over, plain = nodes
    ns = e2e_namespace
    big = {Cap.MEMORY: "40Gi", Cap.CORES: "0", Cap.VIRTUAL_MEMORY: "60Gi"}
    # the opt-in class finds no device where nothing publishes virtualMemory
    refused = _schedule(k8s_api, ns, "big-on-plain", OPT_IN_CLASS, big, node=plain)
    assert not refused.bound
    verdict = _schedule(k8s_api, ns, "big", OPT_IN_CLASS, big)
    assert verdict.bound, verdict.message
    (result,) = verdict.results
    assert result["pool"] == over and str(result["device"]).endswith("-vgpu"), result
    assert _bytes(result, Cap.VIRTUAL_MEMORY) == 60 * GiB and _bytes(result, Cap.MEMORY) == 40 * GiB
    configs = _allocation(k8s_api, ns, "big")["devices"].get("config") or []
    assert any(
        c["source"] == "FromClass"
        and c["opaque"]["driver"] == DRIVER_NAME
        and c["opaque"]["parameters"].get("memoryOversubscription") == "enabled"
        for c in configs
    ), configs
    # claims that did not opt in, on the same node: 40Gi fits beside it on the other GPU only; a second 40Gi
    # fits nowhere (81559Mi - 40Gi is less), whatever virtualMemory the GPUs publish; 30Gi still does
    first = _schedule(
        k8s_api, ns, "plain-40a", "vgpu.tessera.dev", {Cap.MEMORY: "40Gi", Cap.CORES: "0"}, over
    )
    assert first.bound, first.message
    assert first.results[0]["device"] != result["device"]
    second = _schedule(
        k8s_api, ns, "plain-40b", "vgpu.tessera.dev", {Cap.MEMORY: "40Gi", Cap.CORES: "0"}, over
    )
    assert not second.bound
    third = _schedule(k8s_api, ns, "plain-30", "vgpu.tessera.dev", {Cap.MEMORY: "30Gi", Cap.CORES: "0"}, over)
    assert third.bound, third.message
    assert _bytes(third.results[0], Cap.VIRTUAL_MEMORY) == 0
