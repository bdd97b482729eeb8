"""The dashboard and the alerts against live data (issue #36): a real Prometheus (built from the upstream Go
module, e2e/prometheus/build.sh) scrapes the helm-installed plugin on the real node through the scrape job
prometheus-operator makes of the chart's ServiceMonitor, and the API server (whose admission counts the
webhook alerts read); it evaluates the chart's own PrometheusRule.

The scenario makes the series exist: a vgpu claim shared by two pods, one holding memory and one filling it
until its limit refuses an allocation (an in-container OOM), and the other GPU lost (the fake NVML answers
GPU_IS_LOST for it, as the real one does for a GPU that fell off the bus). Then every query of the Grafana
dashboard (its variables set to this node and this namespace) and every alert expression goes through
Prometheus's HTTP API: each returns at least one series, except those listed as empty here with the reason,
which must return none; every metric selector in them matches series of this node; and TesseraGpuLost
reaches `firing`. The table query → series count is written to `<tmp>/prometheus-queries.md` and logged."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
import structlog

from e2e.harness.kube import wait_for
from e2e.harness.monitoring import (
    dashboard_queries,
    selectors,
    table,
    variable_queries,
)
from e2e.harness.prometheus import PrometheusServer
from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, probe_pod, resource_claim, vgpu

from .helpers import apply, claim_of, gpu_index, published_attribute, report, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
log = structlog.get_logger(__name__)

RATE_WINDOW = "10s"  # Grafana's $__rate_interval: at least 4 scrape intervals (the fixture scrapes every 1 s)

# Dashboard panels that return nothing in this scenario, and why; they must return nothing (a query that
# returns series where it should not is as wrong as one that never does).
EMPTY_PANELS = {
    "MIG instances by profile [A]": "no MIG instance on the node (test_real_mig.py makes them)",
    "Claim errors by reason [A]": "no claim fails here: the counter has no series until one does",
    "MIG create / destroy latency (p99) [A]": "no MIG operation in this scenario",
    # the webhook's panels: test_real_admission.py scrapes the webhook's own series
    "Webhook reviews by outcome, refusals by reason [A]": "the webhook is not installed in this scenario",
    "Webhook reviews by outcome, refusals by reason [B]": "the webhook is not installed in this scenario",
    "Webhook review latency (p50, p99) [A]": "the webhook is not installed in this scenario",
    "Webhook review latency (p50, p99) [B]": "the webhook is not installed in this scenario",
    "Checkpoint and claim status writes [B]": "usage goes into claim status at most every 60 s "
    "(usageStatusInterval), longer than this scenario: the counter has no series before its first write",
}
# Alert expressions that are quiet in this scenario, and why (each must then return nothing).
QUIET_ALERTS = {
    "TesseraGpuUnhealthy": "the only unhealthy GPU is lost, which this alert leaves to TesseraGpuLost",
    "TesseraGpuCordonedForADay": "no GPU is cordoned",
    "TesseraClaimOverMemoryLimit": "the limit holds: used <= limit",
    "TesseraNodePluginDown": "the plugin answers",
    "TesseraSlicePublishingFailing": "publishing works",
    "TesseraCheckpointWriteFailing": "the checkpoint is writable",
    "TesseraPrepareFailing": "every claim prepares",
    "TesseraHealthChecksFailing": "NVML answers (a lost GPU is a reading, not a failed check)",
    "TesseraMpsDaemonRestartLoop": "no MPS claim here",
    "TesseraWebhookUnreachable": "the webhook is not installed in this scenario",
    # test_real_admission.py fires it on the webhook's refusals
    "TesseraWebhookRefusingPods": "the webhook is not installed in this scenario",
    "TesseraWebhookFailing": "the webhook is not installed in this scenario",
}
# Metric selectors of the alerts and the dashboard (this node and namespace written as $node and $namespace)
# that match no series here, and why; every other selector must match some.
ABSENT_SELECTORS = {
    'tessera_gpu_mig_instances{node=~"$node"}': "no MIG instance",
    'tessera_mig_operation_duration_seconds_bucket{node=~"$node"}': "no MIG operation",
    'tessera_claim_errors_total{node=~"$node"}': "no claim error",
    'tessera_claim_errors_total{call="prepare"}': "no claim error",
    'tessera_claim_status_writes_total{node=~"$node"}': "no usage write yet (see EMPTY_PANELS)",
    "tessera_mps_daemon_restarts_total": "no MPS daemon",
    'tessera_health_checks_total{result="failed"}': "no failed health check",
    'tessera_webhook_reviews_total{outcome="error"}': "the webhook is not installed here",
    "tessera_webhook_reviews_total": "the webhook is not installed here",
    "tessera_webhook_refusals_total": "the webhook is not installed here",
    "tessera_webhook_review_duration_seconds_bucket": "the webhook is not installed here",
}

# Selectors whose series depend on the scenarios before this one, so neither answer is wrong here: the API
# server counts the webhook's refusals for as long as it runs, and test_real_admission.py may have made some
# on this plane (its own test asserts them). Their counts are still listed.
EITHER_SELECTORS = {
    # (the alerts' selectors as Prometheus prints the loaded rule: matchers sorted)
    'apiserver_admission_webhook_rejection_count{error_type="calling_webhook_error",'
    'name="pods.admission.tessera.dev"}': "refusals counted while earlier scenarios ran the webhook",
    'apiserver_admission_webhook_rejection_count{error_type="no_error",'
    'name="pods.admission.tessera.dev"}': "refusals counted while earlier scenarios ran the webhook",
}


def _count(server: PrometheusServer, expr: str) -> int:
    return len(server.query(expr))


def _lose(real_node: RealNode, uuid: str) -> Path:
    """The fake NVML's marker for a GPU that fell off the bus (interceptor/fake/nvml/api_device.c)."""
    marker = real_node.driver.host_view().lost_marker(uuid)
    marker.write_text("lost by test_real_prometheus.py\n")
    return marker


def test_every_dashboard_query_and_alert_meets_live_data_and_a_lost_gpu_fires(
    bed: SimCluster, real_node: RealNode, real_ns: str, prometheus: PrometheusServer, tmp_path: Path
) -> None:
    started = time.monotonic()
    node = real_node.name
    apply(
        bed,
        real_ns,
        [
            resource_claim("slice", vgpu("2000Mi", "20")),
            probe_pod(
                "holder",
                node=node,
                claims={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("hold", "500"), claims=("gpu",))],
            ),
        ],
    )
    holder = running(real_node, real_ns, "holder")
    uid = claim_of(real_node, real_ns, holder, "gpu")["metadata"]["uid"]
    report(real_node, holder, "cuda")
    # The counters must be seen at 0 before the OOM, or increase() has nothing to compare with.
    wait_for(
        "the claim's OOM counter scraped",
        lambda: _count(prometheus, f'tessera_claim_oom_refusals_total{{uid="{uid}"}} == 0') >= 1,
        timeout_s=30,
    )
    apply(
        bed,
        real_ns,
        [
            probe_pod(
                "filler",
                node=node,
                claims={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("fill",), claims=("gpu",))],
            )
        ],
    )
    filler = running(real_node, real_ns, "filler")
    report(real_node, filler, "cuda")
    (device,) = [r["device"] for r in results(real_node, real_ns, holder, "gpu")]
    lost = 1 - gpu_index(device)
    lost_uuid = str(published_attribute(real_node, f"gpu-{lost}", "uuid"))
    marker = _lose(real_node, lost_uuid)
    try:
        wait_for(
            "TesseraGpuLost firing",
            lambda: _count(prometheus, 'ALERTS{alertname="TesseraGpuLost",alertstate="firing"}') >= 1,
            timeout_s=45,
            interval_s=0.5,
        )
        wait_for(
            "the OOM seen by increase()",
            lambda: _count(prometheus, f'increase(tessera_claim_oom_refusals_total{{uid="{uid}"}}[10m]) > 0'),
            timeout_s=30,
        )
        (firing,) = [a for a in prometheus.alerts("TesseraGpuLost") if a["state"] == "firing"]
        assert firing["labels"]["gpu_uuid"] == lost_uuid and firing["labels"]["node"] == node, firing
        rows = _evaluate(prometheus, node=node, namespace=real_ns)
    finally:
        marker.unlink()
    out = tmp_path / "prometheus-queries.md"
    out.write_text(table(rows))
    log.info("prometheus.queries", file=str(out), seconds=round(time.monotonic() - started, 1))
    print(f"\nquery -> series on {node} ({out}):\n{table(rows)}")
    wait_for(
        "the lost GPU healthy again",
        lambda: _count(prometheus, f'tessera_gpu_healthy{{gpu_uuid="{lost_uuid}"}} == 1') >= 1,
        timeout_s=30,
    )


def _evaluate(server: PrometheusServer, *, node: str, namespace: str) -> list[tuple[str, str, int]]:
    """Every query and alert expression evaluated now: (what, expression, series); asserts as it goes and
    reports every wrong one at once."""
    rows: list[tuple[str, str, int]] = []
    wrong: list[str] = []
    for name, (metric, label) in variable_queries().items():
        values = server.label_values(label, match=metric)
        wanted = {"node": node, "namespace": namespace}[name]
        rows.append((f"variable ${name}", f"label_values({metric}, {label})", len(values)))
        if wanted not in values:
            wrong.append(f"variable ${name}: {wanted} not in {values}")
    variables = {"node": node, "namespace": namespace, "__rate_interval": RATE_WINDOW}
    queries = dashboard_queries(variables)
    for q in queries:
        n = _count(server, q.expr)
        rows.append((q.key, q.expr, n))
        if (n == 0) != (q.key in EMPTY_PANELS):
            wrong.append(f"panel {q.key}: {n} series ({q.expr})")
    # the alert expressions as Prometheus loaded them from the chart's PrometheusRule
    expressions = {r["name"]: str(r["query"]) for r in server.rules() if r["type"] == "alerting"}
    for alert, expr in expressions.items():
        n = _count(server, expr)
        rows.append((f"alert {alert}", " ".join(expr.split()), n))
        if (n == 0) != (alert in QUIET_ALERTS):
            wrong.append(f"alert {alert}: {n} series")
    seen: set[str] = set()
    for expr in [q.expr for q in queries] + list(expressions.values()):
        for s in selectors(expr):
            if s in seen:
                continue
            seen.add(s)
            n = _count(server, s)
            key = s.replace(f'"{node}"', '"$node"').replace(f'"{namespace}"', '"$namespace"')
            rows.append((f"selector {key}", s, n))
            if key not in EITHER_SELECTORS and (n == 0) != (key in ABSENT_SELECTORS):
                wrong.append(f"selector {key}: {n} series")
    assert not wrong, "\n".join(wrong) + "\n" + table(rows)
    return rows
