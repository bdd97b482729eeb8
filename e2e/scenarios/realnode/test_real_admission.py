"""The admission webhook as it ships: `helm upgrade --set admissionWebhook.enabled=true` on the installed
release, the webhook running as the chart's Deployment pod from our image on the real node, and the real
kube-apiserver calling it through the chart's Service (resolved to the pod's EndpointSlice address) over TLS
with the certificate the webhook made itself and patched into the MutatingWebhookConfiguration.

A HAMi pod applied unchanged is rewritten to a claim template and runs on the real node with the limits it
asked for, in its container; an invalid one is refused with the field named. Afterwards the webhook is turned
off again (its configuration has failurePolicy Fail) and its Secret removed."""

from __future__ import annotations

import base64
import socket
from collections.abc import Iterator
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from admission.convert import names
from e2e.kube import Json, wait_for
from e2e.kubelet_standin.errors import StandInError
from e2e.plugin_identity import SYSTEM_NS
from e2e.realnode.chart import ADMISSION, ADMISSION_LABELS, IMAGE_REPOSITORY, PluginPod
from e2e.realnode.config import PROBE_IMAGE
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, probe_pod
from e2e.testbed import SimCluster
from e2e.webhook import ca_bundle

from .helpers import MIB, apply, limited_gpu, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]

LIMIT_MIB = 3000
CORES = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ready_endpoints(node: RealNode) -> list[str]:
    """The ready "ip:port"s of the webhook Service's EndpointSlices: where the API server calls it."""
    slices = k8s.DiscoveryV1Api(node.api).list_namespaced_endpoint_slice(
        SYSTEM_NS, label_selector=f"kubernetes.io/service-name={ADMISSION}"
    )
    found = []
    for s in slices.items:
        ports = [p.port for p in s.ports or []]
        for e in s.endpoints or []:
            if e.conditions is not None and e.conditions.ready:
                found += [f"{a}:{p}" for a in e.addresses for p in ports]
    return found


@pytest.fixture(scope="module")
def webhook(real_node: RealNode) -> Iterator[PluginPod]:
    port = _free_port()
    chart = real_node.chart
    chart.enable_webhook(port=port)
    try:
        pod = chart.wait_ready(labels=ADMISSION_LABELS, timeout_s=120)
        wait_for("the caBundle in the webhook's configuration", lambda: ca_bundle(real_node.api))
        wait_for(f"a ready endpoint of Service {ADMISSION}", lambda: _ready_endpoints(real_node))
        yield pod
    finally:
        chart.disable_webhook()
        wait_for("the webhook's pods to go", lambda: not chart.pods(ADMISSION_LABELS), timeout_s=60)
        try:  # the webhook made it, not helm: it outlives the release's objects
            k8s.CoreV1Api(real_node.api).delete_namespaced_secret(f"{ADMISSION}-tls", SYSTEM_NS)
        except ApiException as e:
            if e.status != 404:
                raise


def hami_pod(name: str, node: RealNode, limits: dict[str, Any]) -> Json:
    """HAMi's pod as its users write it (nvidia.com/* limits, no claim), with the probe in its container."""
    pod = probe_pod(name, node=node.name, containers=[ProbeContainer("cuda", ("hold", "100"))])
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    return pod


def logged(pod: PluginPod, event: str, name: str) -> bool:
    """Whether the webhook pod logged `event` for the Pod `name` (it answered that very call)."""
    return any(e.get("event") == event and e.get("name") == name for e in pod.events())


def test_the_webhook_pod_made_its_certificate_and_serves_through_the_service(
    real_node: RealNode, webhook: PluginPod
) -> None:
    core = k8s.CoreV1Api(real_node.api)
    spec = core.read_namespaced_pod(webhook.name, SYSTEM_NS).spec
    assert spec is not None
    assert spec.node_name == real_node.name
    assert spec.containers[0].image == f"{IMAGE_REPOSITORY}:{real_node.chart.image_tag}"
    secret = core.read_namespaced_secret(f"{ADMISSION}-tls", SYSTEM_NS)
    assert secret.data is not None
    assert base64.b64decode(ca_bundle(real_node.api)).startswith(base64.b64decode(secret.data["ca.crt"]))
    pdb = k8s.PolicyV1Api(real_node.api).read_namespaced_pod_disruption_budget(ADMISSION, SYSTEM_NS)
    assert pdb.spec is not None and pdb.spec.min_available == 1
    address = core.read_namespaced_pod(webhook.name, SYSTEM_NS).status
    assert address is not None
    [endpoint] = _ready_endpoints(real_node)
    assert endpoint.startswith(f"{address.pod_ip}:")


def test_a_hami_pod_applied_unchanged_runs_with_its_limits(
    bed: SimCluster, real_node: RealNode, real_ns: str, webhook: PluginPod
) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": LIMIT_MIB, "nvidia.com/gpucores": CORES}
    apply(bed, real_ns, [hami_pod("hami", real_node, limits)])
    pod = running(real_node, real_ns, "hami")
    assert logged(webhook, "pod converted", "hami")

    container = pod["spec"]["containers"][0]
    assert container["image"] == PROBE_IMAGE
    assert not any(k.startswith("nvidia.com/") for k in (container["resources"].get("limits") or {}))
    [entry] = pod["spec"]["resourceClaims"]
    assert entry["resourceClaimTemplateName"]
    assert container["resources"]["claims"] == [{"name": entry["name"]}]
    record = yaml.safe_load(pod["metadata"]["annotations"][names.CONVERTED_ANNOTATION])
    assert record["containers"][0]["from"]["nvidia.com/gpumem"] == str(LIMIT_MIB)

    [result] = results(real_node, real_ns, pod, entry["name"])
    assert result["consumedCapacity"]["memory"] == f"{LIMIT_MIB}Mi"
    assert str(result["consumedCapacity"]["cores"]) == str(CORES)
    probe = report(real_node, pod, "cuda")
    assert probe["cuInit"] == 0
    env = probe["env"]
    assert env["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{LIMIT_MIB}m"
    assert env["CUDA_DEVICE_SM_LIMIT_0"] == str(CORES)
    assert limited_gpu(probe)["total"] == LIMIT_MIB * MIB


def test_an_invalid_hami_pod_is_refused_naming_the_field(
    bed: SimCluster, real_node: RealNode, real_ns: str, webhook: PluginPod
) -> None:
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": LIMIT_MIB, "nvidia.com/gpucores": 150}
    with pytest.raises(StandInError) as refused:
        apply(bed, real_ns, [hami_pod("too-many-cores", real_node, limits)])
    text = str(refused.value)
    assert "denied the request" in text
    assert "spec.containers[0].resources.limits[nvidia.com/gpucores]: 150 is over 100" in text
    assert logged(webhook, "pod refused", "too-many-cores")
    assert k8s.CoreV1Api(real_node.api).list_namespaced_pod(real_ns).items == []
