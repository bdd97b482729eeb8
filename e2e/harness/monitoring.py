"""What a platform team's Prometheus would do with Tessera, taken from what Tessera ships: the scrape job
prometheus-operator makes of the chart's ServiceMonitor, the alert rules of the chart's PrometheusRule, and
the queries of the Grafana dashboard with its template variables filled in. The e2e scenario runs them on a
real Prometheus (e2e.harness.prometheus) against the helm-installed plugin and admission webhook.

The scrape job follows what prometheus-operator generates for a ServiceMonitor endpoint (EndpointSlice
discovery through the API server; keep the Service by the monitor's selector and the endpoint by its port
name; `namespace`, `service`, `pod`, `container`, `endpoint` target labels, `job` from the Service's name;
then the monitor's own relabelings; `honor_labels` from its `honorLabels`), so a label the chart's monitor
gets wrong or a clash with the operator's target labels shows in the series."""

from __future__ import annotations

import copy
import json
import re
import subprocess
from dataclasses import dataclass
from pathlib import Path

import yaml

from e2e.controlplane.releases import default_version
from e2e.harness.kube import Json
from e2e.harness.webhook import helm_binary

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "deploy" / "helm" / "tessera"
DASHBOARD = ROOT / "deploy" / "grafana" / "tessera-gpus.json"
METRICS_TEMPLATE = "templates/metrics.yaml"


def chart_monitoring(namespace: str) -> tuple[list[Json], list[Json]]:
    """The chart's ServiceMonitors (the node plugin's, then the admission webhook's) and its PrometheusRule's
    groups, rendered as a user turning them on gets them (`metrics.serviceMonitor.enabled`,
    `metrics.prometheusRule.enabled`, with `admissionWebhook.enabled`)."""
    helm = helm_binary()
    assert helm is not None, "no helm: run deploy/helm/build-helm.sh"
    done = subprocess.run(
        [helm, "template", "t", str(CHART), "--namespace", namespace,
         "--set", "metrics.serviceMonitor.enabled=true", "--set", "metrics.prometheusRule.enabled=true",
         "--set", "admissionWebhook.enabled=true",
         "--show-only", METRICS_TEMPLATE, "--kube-version", default_version().removeprefix("v")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    documents = [d for d in yaml.safe_load_all(done.stdout) if d]
    monitors = {d["metadata"]["name"]: d for d in documents if d["kind"] == "ServiceMonitor"}
    assert sorted(monitors) == ["tessera-admission", "tessera-node-plugin"], sorted(monitors)
    (rule,) = [d for d in documents if d["kind"] == "PrometheusRule"]
    return [monitors["tessera-node-plugin"], monitors["tessera-admission"]], list(rule["spec"]["groups"])


def _sanitized(label: str) -> str:
    """A Kubernetes label name as Prometheus's discovery meta labels spell it."""
    return re.sub(r"[^a-zA-Z0-9_]", "_", label)


def _relabeling(r: Json) -> Json:
    """A monitor's relabeling (camelCase) as a scrape config's (snake_case)."""
    keys = {"sourceLabels": "source_labels", "targetLabel": "target_label"}
    return {keys.get(k, k.lower()): v for k, v in r.items()}


def service_monitor_job(monitor: Json, *, kubeconfig: Path) -> list[Json]:
    """The scrape jobs prometheus-operator generates for `monitor` (one per endpoint), discovering through the
    API server `kubeconfig` names."""
    spec = monitor["spec"]
    meta = monitor["metadata"]
    namespaces = spec.get("namespaceSelector", {}).get("matchNames") or [meta["namespace"]]
    selector = spec["selector"]["matchLabels"]
    jobs = []
    for i, endpoint in enumerate(spec["endpoints"]):
        relabel: list[Json] = [
            {
                "action": "keep",
                "source_labels": [f"__meta_kubernetes_service_label_{_sanitized(k)}" for k in selector],
                "regex": ";".join(re.escape(v) for v in selector.values()),
            },
            {"action": "keep", "source_labels": ["__meta_kubernetes_endpointslice_port_name"],
             "regex": re.escape(endpoint["port"])},
            {"source_labels": ["__meta_kubernetes_namespace"], "target_label": "namespace"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "service"},
            {"source_labels": ["__meta_kubernetes_pod_name"], "target_label": "pod"},
            {"source_labels": ["__meta_kubernetes_pod_container_name"], "target_label": "container"},
            {"source_labels": ["__meta_kubernetes_service_name"], "target_label": "job"},
            {"target_label": "endpoint", "replacement": endpoint["port"]},
            *(_relabeling(r) for r in endpoint.get("relabelings") or []),
        ]  # fmt: skip
        jobs.append(
            {
                "job_name": f"serviceMonitor/{meta['namespace']}/{meta['name']}/{i}",
                "honor_labels": bool(endpoint.get("honorLabels", False)),
                "metrics_path": endpoint.get("path", "/metrics"),
                "kubernetes_sd_configs": [
                    {
                        "role": "endpointslice",
                        "kubeconfig_file": str(kubeconfig),
                        "namespaces": {"names": namespaces},
                    }
                ],
                "relabel_configs": relabel,
            }
        )
    return jobs


def apiserver_job(*, server: str, ca: Path, cert: Path, key: Path) -> Json:
    """The API server's /metrics (its admission webhook counts: the webhook alerts), as kube-prometheus
    scrapes it (job `apiserver`)."""
    return {
        "job_name": "apiserver",
        "scheme": "https",
        "static_configs": [{"targets": [server.removeprefix("https://")]}],
        "tls_config": {"ca_file": str(ca), "cert_file": str(cert), "key_file": str(key)},
    }


def with_for(groups: list[Json], durations: dict[str, str]) -> list[Json]:
    """A copy of `groups` whose alerts named in `durations` wait that long instead (a test's copy only)."""
    out = copy.deepcopy(groups)
    for group in out:
        for rule in group["rules"]:
            if rule.get("alert") in durations:
                rule["for"] = durations[rule["alert"]]
    return out


@dataclass(frozen=True, slots=True)
class DashboardQuery:
    panel: str
    ref: str  # the target's refId ("A", "B", …) within its panel
    expr: str  # with the template variables substituted

    @property
    def key(self) -> str:
        return f"{self.panel} [{self.ref}]"


def _panels(items: list[Json]) -> list[Json]:
    out = []
    for p in items:
        out.append(p)
        out.extend(_panels(p.get("panels", [])))
    return out


def dashboard() -> Json:
    loaded: Json = json.loads(DASHBOARD.read_text(encoding="utf-8"))
    return loaded


def dashboard_queries(variables: dict[str, str], board: Json | None = None) -> list[DashboardQuery]:
    """Every panel query of the dashboard, `$name` and `${name}` replaced by `variables[name]`; a variable
    left unreplaced is an error (the query would not be the one Grafana sends)."""
    found = []
    for p in _panels((board or dashboard())["panels"]):
        for t in p.get("targets", []):
            expr = substitute(t["expr"], variables)
            found.append(DashboardQuery(panel=p["title"], ref=t.get("refId", "?"), expr=expr))
    return found


def substitute(expr: str, variables: dict[str, str]) -> str:
    def one(m: re.Match[str]) -> str:
        name = m.group(1) or m.group(2)
        if name not in variables:
            raise KeyError(f"no value for ${name} in {expr!r}")
        return variables[name]

    return re.sub(r"\$\{(\w+)\}|\$(\w+)", one, expr)


def variable_queries(board: Json | None = None) -> dict[str, tuple[str, str]]:
    """The dashboard's query variables: name → (metric, label) of their `label_values(metric, label)`."""
    out = {}
    for v in (board or dashboard())["templating"]["list"]:
        if v["type"] == "query":
            m = re.fullmatch(r"label_values\((\w+),\s*(\w+)\)", v["query"].strip())
            assert m is not None, f"variable {v['name']}: only label_values(metric, label) is understood"
            out[v["name"]] = (m.group(1), m.group(2))
    return out


def selectors(expr: str) -> list[str]:
    """The vector selectors of a PromQL expression (metric name and its matchers, no range)."""
    return sorted(set(re.findall(r"\b(?:tessera_|up\b|apiserver_)[a-z0-9_]*(?:\{[^}]*\})?", expr)))


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


def table(rows: list[tuple[str, str, int]]) -> str:
    """`what | query | series` rows as a Markdown table."""
    lines = ["| what | query | series |", "|---|---|---|"]
    lines += [f"| {what} | `{_cell(expr)}` | {n} |" for what, expr, n in rows]
    return "\n".join(lines) + "\n"
