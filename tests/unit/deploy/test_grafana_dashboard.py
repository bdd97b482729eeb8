"""The Grafana dashboard parses, every metric it queries is one the node plugin or the webhook exports, and
docs/metrics.md names every exported metric."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from admission.metrics import REGISTRY as WEBHOOK_REGISTRY
from kubelet_plugin.metrics import REGISTRY
from kubelet_plugin.observability.node_metrics import FAMILIES

ROOT = Path(__file__).resolve().parents[3]
DASHBOARD = ROOT / "deploy" / "grafana" / "tessera-gpus.json"
DOCS = ROOT / "docs" / "metrics.md"
SUFFIXES = {"histogram": ("_bucket", "_count", "_sum"), "counter": ("_total",), "gauge": ("",)}


def exported() -> set[str]:
    """Every sample name a scrape can show: the daemon's instruments and the scrape-time families, and the
    admission webhook's own (admission/metrics.py)."""
    names = {name for name, _, _, _ in FAMILIES}
    for family in (*REGISTRY.collect(), *WEBHOOK_REGISTRY.collect()):
        names |= {family.name + s for s in SUFFIXES.get(family.type, ("",))}
    return names


def panels(items: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    for p in items:
        yield p
        yield from panels(p.get("panels", []))


def queries(dashboard: dict[str, Any]) -> list[str]:
    out = [t["expr"] for p in panels(dashboard["panels"]) for t in p.get("targets", [])]
    out += [v["query"] for v in dashboard["templating"]["list"] if v["type"] == "query"]
    return out


def test_dashboard_parses_and_queries_only_exported_metrics() -> None:
    dashboard = json.loads(DASHBOARD.read_text())
    assert dashboard["uid"] == "tessera-gpus" and dashboard["panels"]
    found = {m for q in queries(dashboard) for m in re.findall(r"\btessera_[a-z0-9_]+", q)}
    assert found, "the dashboard queries no Tessera metric"
    unknown = sorted(found - exported())
    assert not unknown, f"queried but not exported: {unknown}"
    ids = [p["id"] for p in panels(dashboard["panels"])]
    assert len(ids) == len(set(ids)), "panel ids must be unique"


def test_dashboard_covers_what_the_issue_asks() -> None:
    text = DASHBOARD.read_text()
    for needed in (
        "tessera_gpu_devices_in_use",  # allocation by family
        "tessera_claim_memory_used_bytes",  # per-claim memory used vs limit
        "tessera_claim_memory_limit_bytes",
        "tessera_claim_gpu_seconds_total",  # SM used vs share and throttling
        "tessera_claim_cores_limit_ratio",
        "tessera_claim_throttled_seconds_total",
        "tessera_kubelet_call_duration_seconds_bucket",  # prepare latency and errors
        "tessera_claim_errors_total",
    ):
        assert needed in text, needed


def test_every_exported_metric_is_in_the_docs() -> None:
    documented = set(re.findall(r"`(tessera_[a-z0-9_]+)`", DOCS.read_text()))
    bases = {n.removesuffix(s) for n in exported() for s in ("_bucket", "_count", "_sum") if n.endswith(s)}
    names = {n for n in exported() if not n.endswith(("_bucket", "_count", "_sum"))} | bases
    assert sorted(names - documented) == []
