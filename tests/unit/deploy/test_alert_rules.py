"""Tessera's alerts (deploy/helm/tessera/files/alerts.yaml) as Prometheus's own tool checks them: `promtool
check rules` and `promtool test rules` over tests/unit/deploy/alerts/ (promtool built from the upstream Go
module by e2e/prometheus/build.sh, which `make test` runs); every alert fires in a test, names metrics the
plugin exports and has its runbook paragraph in docs/metrics.md; the chart ships them as a PrometheusRule."""

from __future__ import annotations

import re
import subprocess
from pathlib import Path
from typing import Any

import yaml

from admission.metrics import REGISTRY as WEBHOOK_REGISTRY
from kubelet_plugin.metrics import REGISTRY
from kubelet_plugin.observability.node_metrics import FAMILIES
from tests.unit.deploy.test_helm_chart import by_kind, needs_helm, render

ROOT = Path(__file__).resolve().parents[3]
RULES = ROOT / "deploy" / "helm" / "tessera" / "files" / "alerts.yaml"
TESTS = sorted((Path(__file__).parent / "alerts").glob("*.yaml"))
METRICS_DOC = ROOT / "docs" / "metrics.md"
BUILD = ROOT / "e2e" / "prometheus" / "build.sh"
# series the alerts read that are not the plugin's: Prometheus's own, the API server's
FOREIGN = frozenset({"up", "apiserver_admission_webhook_rejection_count"})
PROMQL_WORDS = frozenset(
    {"on", "unless", "and", "or", "by", "sum", "increase", "rate", "ignoring", "without"}
)


def promtool() -> Path:
    done = subprocess.run(
        ["bash", str(BUILD), "--check"], capture_output=True, text=True, timeout=60, check=False
    )
    assert done.returncode == 0, f"promtool is not built: run `make promtool` ({done.stderr.strip()})"
    return Path(done.stdout.strip().splitlines()[-1]) / "promtool"


def rules() -> list[dict[str, Any]]:
    return [r for g in yaml.safe_load(RULES.read_text())["groups"] for r in g["rules"]]


def test_promtool_finds_the_rules_valid() -> None:
    done = subprocess.run(
        [str(promtool()), "check", "rules", str(RULES)],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert f"SUCCESS: {len(rules())} rules found" in done.stdout


def test_every_alert_fires_and_stays_quiet_as_its_promtool_tests_say() -> None:
    done = subprocess.run(
        [str(promtool()), "test", "rules", *map(str, TESTS)],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
        cwd=Path(__file__).parent / "alerts",
    )
    assert done.returncode == 0, done.stdout + done.stderr
    assert done.stdout.count("SUCCESS") == len(TESTS)


def test_every_alert_has_a_test_that_makes_it_fire() -> None:
    fired = set()
    for path in TESTS:
        for case in yaml.safe_load(path.read_text())["tests"]:
            for check in case.get("alert_rule_test", []):
                if check.get("exp_alerts"):
                    fired.add(check["alertname"])
    assert {r["alert"] for r in rules()} == fired


def test_every_alert_reads_metrics_that_exist() -> None:
    exported = {name for name, _, _, _ in FAMILIES}
    suffixes = {"counter": ("_total",), "histogram": ("_bucket", "_sum", "_count")}
    # a labelled family has no sample until its first use: its declared name
    for metric in (*REGISTRY.collect(), *WEBHOOK_REGISTRY.collect()):
        exported |= {metric.name + suffix for suffix in suffixes.get(metric.type, ("",))}
    for rule in rules():
        expr = rule["expr"]
        names = set(re.findall(r"\b([a-z_][a-z0-9_]*)\s*\{", expr)) | set(
            re.findall(r"\btessera_[a-z0-9_]+", expr)
        )
        for name in names - PROMQL_WORDS - FOREIGN:
            assert name in exported, f"{rule['alert']} reads {name}, which Tessera does not export"


def test_every_alert_has_its_runbook_paragraph_in_the_metrics_doc() -> None:
    headings = {
        re.sub(r"[^a-z0-9 -]", "", h.strip().lower()).replace(" ", "-")
        for h in re.findall(r"^#+ (.+)$", METRICS_DOC.read_text(), re.M)
    }
    for rule in rules():
        anchor = rule["alert"].lower()
        assert rule["annotations"]["runbook"] == f"docs/metrics.md#{anchor}"
        assert anchor in headings, f"docs/metrics.md has no heading {rule['alert']} (its runbook)"
        assert rule["labels"]["severity"] in ("critical", "warning", "info")


@needs_helm
def test_the_chart_ships_the_alerts_as_a_prometheusrule_only_when_asked() -> None:
    assert not by_kind(render(), "PrometheusRule")
    objs = render(
        "--set",
        "metrics.prometheusRule.enabled=true",
        "--set",
        "metrics.prometheusRule.runbookBase=https://docs.example.com/metrics",
        "--set",
        "metrics.prometheusRule.labels.release=kube-prometheus",
    )
    rule = by_kind(objs, "PrometheusRule")["tessera"]
    assert rule["metadata"]["labels"]["release"] == "kube-prometheus"
    shipped = [r for g in rule["spec"]["groups"] for r in g["rules"]]
    for ours, theirs in zip(rules(), shipped, strict=True):
        anchor = ours["alert"].lower()
        extra = {"runbook_url": f"https://docs.example.com/metrics#{anchor}"}
        assert theirs == {**ours, "annotations": {**ours["annotations"], **extra}}
