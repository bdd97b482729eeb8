"""The webhook's own metrics, scraped over HTTP from the port `tessera webhook --metrics-address` serves:
each review counted once by outcome, refusals by reason, conversions by source format, the latency
histogram; the reconciler's templates made and swept; and no label taken from what a review carries."""

from __future__ import annotations

import copy
import datetime as dt
import http.client
import json
import ssl
import urllib.request
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml
from prometheus_client.parser import text_string_to_metric_families

from admission import metrics
from admission.certs import renew
from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.main import Webhook, metrics_server
from admission.server import Tls, WebhookServer
from dra_driver.io.metrics_server import MetricsServer

REPO = Path(__file__).resolve().parents[3]
EXAMPLES = REPO / "admission" / "examples"
OPTIONS = Options(known_products(), replace_schedulers=("volcano",))
Samples = dict[tuple[str, frozenset[tuple[str, str]]], float]


def pod(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def review(obj: Mapping[str, Any], *, kind: str = "Pod", namespace: str = "team-a") -> dict[str, Any]:
    group = "" if kind == "Pod" else "resource.k8s.io"
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": group, "version": "v1", "kind": kind},
            "operation": "CREATE",
            "namespace": namespace,
            "object": obj,
        },
    }


class Stored:
    """The templates' watch, as the webhook reads it: `squat` makes every name hold something else; `fail`
    makes the lookup raise (a bug the server answers 500 for)."""

    squat = False
    fail = False

    def __call__(self, namespace: str, name: str) -> Mapping[str, Any] | None:
        if self.fail:
            raise RuntimeError("the watch's view is broken")
        if self.squat:
            return {"metadata": {"name": name, "namespace": namespace}, "spec": {"spec": {"devices": {}}}}
        return None


@pytest.fixture
def webhook() -> Iterator[tuple[WebhookServer, bytes, MetricsServer, Stored]]:
    bundle = renew(None, ["127.0.0.1"], dt.datetime.now(dt.UTC))
    assert bundle is not None
    tls = Tls()
    tls.load(bundle.serving)
    stored = Stored()
    server = WebhookServer("127.0.0.1", 0, tls, Webhook(OPTIONS, None, stored).answer)
    scraped = metrics_server("127.0.0.1:0")
    assert scraped is not None
    server.start()
    scraped.start()
    yield server, bundle.ca.cert_pem, scraped, stored
    scraped.stop()
    server.stop()


def post(server: WebhookServer, ca_pem: bytes, body: Mapping[str, Any]) -> int:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)
    conn.request("POST", "/mutate", body=json.dumps(body))
    response = conn.getresponse()
    response.read()
    conn.close()
    return response.status


def scrape(scraped: MetricsServer) -> tuple[str, Samples]:
    with urllib.request.urlopen(f"http://127.0.0.1:{scraped.port}/metrics", timeout=5) as r:
        assert r.status == 200
        text = r.read().decode()
    found = {
        (s.name, frozenset(s.labels.items())): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }
    return text, found


def delta(before: Samples, after: Samples, name: str, **labels: str) -> float:
    key = (name, frozenset(labels.items()))
    return after[key] - before.get(key, 0.0)


def test_each_review_is_counted_by_outcome_reason_and_source(
    webhook: tuple[WebhookServer, bytes, MetricsServer, Stored],
) -> None:
    server, ca, scraped, stored = webhook
    nvidia = next(
        d
        for d in yaml.safe_load_all((EXAMPLES / "nvidia" / "mps.yaml").read_text())
        if d["kind"] == "ResourceClaimTemplate"
    )
    too_many_cores = pod("hami-default-use.yaml")
    too_many_cores["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = 101
    plain = {"metadata": {"name": "web"}, "spec": {"containers": [{"name": "c", "image": "nginx"}]}}
    _, before = scrape(scraped)

    for body in (
        review(pod("hami-default-use.yaml")),
        review(pod("hami-memory-fraction.yaml")),
        review(pod("volcano-vgpu.yaml")),
        review(nvidia, kind="ResourceClaimTemplate"),
        review(plain),
        review(too_many_cores),
    ):
        assert post(server, ca, body) == 200
    stored.squat = True
    assert post(server, ca, review(pod("hami-default-use.yaml"))) == 200
    stored.squat, stored.fail = False, True
    assert post(server, ca, review(pod("hami-default-use.yaml"))) == 500
    _, after = scrape(scraped)

    reviews = "tessera_webhook_reviews_total"
    assert {o: delta(before, after, reviews, outcome=o) for o in metrics.OUTCOMES} == {
        "converted": 4,
        "unchanged": 1,
        "refused": 2,
        "error": 1,
    }
    refusals = "tessera_webhook_refusals_total"
    assert delta(before, after, refusals, reason="invalid") == 1
    assert delta(before, after, refusals, reason="conflict") == 1
    assert delta(before, after, refusals, reason="other") == 0
    conversions = "tessera_webhook_conversions_total"
    assert {s: delta(before, after, conversions, source=s) for s in metrics.SOURCES} == {
        "hami": 2,
        "volcano-vgpu": 1,
        "nvidia-dra": 1,
        "none": 1,
    }
    assert delta(before, after, "tessera_webhook_review_duration_seconds_count") == 8
    assert delta(before, after, "tessera_webhook_review_duration_seconds_bucket", le="+Inf") == 8


def test_no_label_comes_from_what_a_review_carries(
    webhook: tuple[WebhookServer, bytes, MetricsServer, Stored],
) -> None:
    """Anyone who reaches the webhook's port may post: a namespace, pod name or message never becomes a
    label, so every series the scrape shows is one of the closed sets, however many distinct pods come."""
    server, ca, scraped, _ = webhook
    _, before = scrape(scraped)
    for i in range(20):
        hostile = copy.deepcopy(pod("hami-default-use.yaml"))
        hostile["metadata"]["name"] = f"pod-label-probe-{i}"
        hostile["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = 101 + i
        assert post(server, ca, review(hostile, namespace=f"ns-label-probe-{i}")) == 200
    text, found = scrape(scraped)
    assert "label-probe" not in text
    webhook_series = {(n, ls) for n, ls in found if n.startswith("tessera_webhook_")}
    allowed = {"outcome": set(metrics.OUTCOMES), "reason": {"invalid", "conflict", "other"},
               "source": set(metrics.SOURCES)}  # fmt: skip
    for _, labels in webhook_series:
        for key, value in labels:
            assert key == "le" or value in allowed[key], (key, value)
    assert webhook_series == {(n, ls) for n, ls in before if n.startswith("tessera_webhook_")}, "a new series"


def test_an_empty_address_serves_no_metrics() -> None:
    assert metrics_server("") is None
