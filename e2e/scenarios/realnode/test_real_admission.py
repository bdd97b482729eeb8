"""The admission webhook as it ships: `helm upgrade --set admissionWebhook.enabled=true` on the installed
release, the webhook running as the chart's Deployment pod from our image on the real node, and the real
kube-apiserver calling it through the chart's Service (resolved to the pod's EndpointSlice address) over TLS
with the certificate the webhook made itself and patched into the MutatingWebhookConfiguration.

A HAMi pod applied unchanged is rewritten to a claim template and runs on the real node with the limits it
asked for, in its container; an invalid one is refused with the field named. The PodDisruptionBudget refuses
to evict the last replica, and a deleted pod's replacement serves the same certificate. Afterwards the webhook
is turned off again (its configuration has failurePolicy Fail) and its Secret removed."""

from __future__ import annotations

import base64
import socket
import time
from collections.abc import Iterator
from typing import Any

import pytest
import structlog
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from admission.convert import names
from e2e.harness.kube import Json, wait_for
from e2e.harness.monitoring import dashboard_queries
from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.harness.prometheus import PrometheusServer
from e2e.harness.testbed import SimCluster
from e2e.harness.webhook import ca_bundle
from e2e.kubelet_standin.errors import StandInError
from e2e.realnode.chart import ADMISSION, ADMISSION_LABELS, IMAGE_REPOSITORY, PluginPod
from e2e.realnode.config import PROBE_IMAGE
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, probe_pod
from tests.support.smoke import covers

from .helpers import MIB, apply, limited_gpu, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
log = structlog.get_logger(__name__)

LIMIT_MIB = 3000
CORES = 30


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _ca(node: RealNode) -> bytes:
    """The CA in the Secret the webhook keeps its TLS in."""
    secret = k8s.CoreV1Api(node.api).read_namespaced_secret(f"{ADMISSION}-tls", SYSTEM_NS)
    assert secret.data is not None
    return base64.b64decode(secret.data["ca.crt"])


@pytest.fixture(scope="module")
def webhook(real_node: RealNode) -> Iterator[PluginPod]:
    port = _free_port()
    chart = real_node.chart
    started = time.monotonic()
    chart.enable_webhook(port=port, metrics_port=_free_port())
    try:
        pod = chart.wait_webhook_serving(timeout_s=120)
        log.info("realnode.webhook_serving", pod=pod.name, seconds=round(time.monotonic() - started, 1))
        yield pod
    finally:
        chart.disable_webhook()
        chart.wait_webhook_gone()


def hami_pod(name: str, node: RealNode, limits: dict[str, Any]) -> Json:
    """HAMi's pod as its users write it (nvidia.com/* limits, no claim), with the probe in its container."""
    pod = probe_pod(name, node=node.name, containers=[ProbeContainer("cuda", ("hold", "100"))])
    del pod["spec"]["resourceClaims"]
    pod["spec"]["containers"][0]["resources"] = {"limits": limits}
    return pod


def logged(pod: PluginPod, event: str, name: str) -> bool:
    """Whether the webhook pod logged `event` for the Pod `name` (it answered that very call)."""
    return bool(pod.logged(event, name=name))


def test_the_webhook_pod_made_its_certificate_and_serves_through_the_service(
    real_node: RealNode, webhook: PluginPod
) -> None:
    core = k8s.CoreV1Api(real_node.api)
    pod = core.read_namespaced_pod(webhook.name, SYSTEM_NS)
    assert pod.spec is not None and pod.status is not None
    assert pod.spec.node_name == real_node.name
    assert pod.spec.containers[0].image == f"{IMAGE_REPOSITORY}:{real_node.chart.image_tag}"
    assert base64.b64decode(ca_bundle(real_node.api)).startswith(_ca(real_node))
    [(endpoint, behind)] = real_node.chart.webhook_endpoints().items()
    assert behind == webhook.name and endpoint.startswith(f"{pod.status.pod_ip}:")
    # turning the webhook on left the node plugin's pod alone
    assert real_node.chart.current.created <= webhook.created


def test_the_disruption_budget_keeps_the_last_replica(real_node: RealNode, webhook: PluginPod) -> None:
    """A drain's eviction of the only webhook pod is refused: GPU pods keep being admitted."""
    policy = k8s.PolicyV1Api(real_node.api)

    def healthy() -> k8s.V1PodDisruptionBudgetStatus | None:
        status = policy.read_namespaced_pod_disruption_budget_status(ADMISSION, SYSTEM_NS).status
        return status if status is not None and status.current_healthy == 1 else None

    status = wait_for("the budget to count the webhook pod", healthy)
    assert status.desired_healthy == 1 and status.disruptions_allowed == 0
    eviction = k8s.V1Eviction.model_validate({"metadata": {"name": webhook.name, "namespace": SYSTEM_NS}})
    with pytest.raises(ApiException) as refused:
        k8s.CoreV1Api(real_node.api).create_namespaced_pod_eviction(webhook.name, SYSTEM_NS, eviction)
    assert refused.value.status == 429 and "disruption budget" in str(refused.value.body)


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


OWN_QUERIES = (
    'sum(tessera_webhook_refusals_total{job="tessera-admission",reason="invalid"})',
    'sum(tessera_webhook_refusals_total{job="tessera-admission",reason="conflict"})',
    'sum(tessera_webhook_conversions_total{job="tessera-admission",source="hami"})',
    'sum(tessera_webhook_review_duration_seconds_count{job="tessera-admission"})',
)


def own_count(prometheus: PrometheusServer, query: str) -> float:
    (series,) = prometheus.query(query)
    return float(series.value)


@covers("tessera webhook --metrics-address")  # the chart's Deployment runs it so; scraped below
def test_the_webhook_refusals_reach_prometheus_and_fire_their_alert(
    real_node: RealNode, real_ns: str, webhook: PluginPod, prometheus: PrometheusServer
) -> None:
    """TesseraWebhookRefusingPods, the chart's rule as Prometheus loaded it, on the API server's live counts
    of this webhook's refusals (`apiserver_admission_webhook_rejection_count`): its webhook name and
    error_type match what the API server counts, and more than 5 refusals in 10 minutes fire it. The webhook's
    own metrics, scraped from its metrics port through the chart's ServiceMonitor, count the same 7 refusals
    (reason invalid) and the one dry-run HAMi pod converted (source hami), 8 reviews timed."""
    core = k8s.CoreV1Api(real_node.api)
    limits = {"nvidia.com/gpu": "1", "nvidia.com/gpumem": str(LIMIT_MIB), "nvidia.com/gpucores": "150"}

    def refuse(name: str) -> None:
        with pytest.raises(ApiException) as refused:
            core.create_namespaced_pod(real_ns, k8s.V1Pod.model_validate(hami_pod(name, real_node, limits)))
        assert "gpucores" in str(refused.value.body)

    # the webhook's own series (tessera_webhook_*, admission/metrics.py) through the chart's ServiceMonitor:
    # every series exists from the start, so what it counts from here is what this test posts
    scraped = 'tessera_webhook_refusals_total{job="tessera-admission"}'
    wait_for("the webhook's metrics scraped", lambda: prometheus.query(scraped), timeout_s=30)
    before = {q: own_count(prometheus, q) for q in OWN_QUERIES}
    converted = hami_pod("converted", real_node, {"nvidia.com/gpu": "1", "nvidia.com/gpumem": "1000"})
    # a dry run: the webhook converts it (sideEffects: None), nothing is kept and no template made
    core.create_namespaced_pod(real_ns, k8s.V1Pod.model_validate(converted), dry_run="All")

    counted = "apiserver_admission_webhook_rejection_count"
    counted += '{name="pods.admission.tessera.dev",error_type="no_error"}'
    refuse("refused-0")  # the counter exists (or moves) and is scraped before the ones the alert counts
    wait_for("the refusal scraped", lambda: prometheus.query(counted), timeout_s=30)
    for i in range(1, 7):
        refuse(f"refused-{i}")
    (expr,) = [r["query"] for r in prometheus.rules() if r["name"] == "TesseraWebhookRefusingPods"]
    firing = 'ALERTS{alertname="TesseraWebhookRefusingPods",alertstate="firing"}'
    wait_for("TesseraWebhookRefusingPods firing", lambda: prometheus.query(firing), timeout_s=30)
    (series,) = prometheus.query(expr)
    assert series.labels == {"name": "pods.admission.tessera.dev"} and float(series.value) > 5, series
    expected = dict(zip(OWN_QUERIES, (7, 0, 1, 8), strict=True))

    def counted_here() -> dict[str, float]:
        return {q: own_count(prometheus, q) - before[q] for q in OWN_QUERIES}

    own = "the webhook's own counts of this test's reviews"
    wait_for(own, lambda: counted_here() == expected, timeout_s=15)
    # the dashboard's webhook panels over these live series: each returns some (a wrong name, label or join
    # would return none; test_real_prometheus.py has no webhook and lists them as empty)
    variables = {"node": real_node.name, "namespace": real_ns, "__rate_interval": "10s"}
    panels = [q for q in dashboard_queries(variables) if q.panel.startswith("Webhook ")]
    assert len(panels) == 4, panels
    assert [q.key for q in panels if not prometheus.query(q.expr)] == []


def test_a_replaced_webhook_pod_keeps_the_certificate_and_admits(
    bed: SimCluster, real_node: RealNode, real_ns: str, webhook: PluginPod
) -> None:
    """The Deployment replaces a deleted pod; the new one serves the CA and certificate kept in the Secret, so
    the caBundle the API server trusts stays. Runs last: it replaces the module's webhook pod."""
    chart, bundle, ca = real_node.chart, ca_bundle(real_node.api), _ca(real_node)
    k8s.CoreV1Api(real_node.api).delete_namespaced_pod(webhook.name, SYSTEM_NS)
    new: PluginPod = wait_for(
        "the ReplicaSet's new webhook pod to be Ready",
        lambda: next((p for p in chart.pods(ADMISSION_LABELS) if p.ready and p.uid != webhook.uid), None),
        timeout_s=120,
    )
    wait_for(
        "the Service to lead to the new pod",
        lambda: list(chart.webhook_endpoints().values()) == [new.name],
    )
    assert (ca_bundle(real_node.api), _ca(real_node)) == (bundle, ca)
    limits = {"nvidia.com/gpu": 1, "nvidia.com/gpumem": LIMIT_MIB, "nvidia.com/gpucores": CORES}
    apply(bed, real_ns, [hami_pod("hami-again", real_node, limits)])
    pod = running(real_node, real_ns, "hami-again")
    [entry] = pod["spec"]["resourceClaims"]
    assert entry["resourceClaimTemplateName"]
    assert logged(new, "pod converted", "hami-again")
    assert not webhook.logged("pod converted", timeout_s=0, name="hami-again")
