"""The webhook's own Prometheus metrics (docs/metrics.md, "The admission webhook"): reviews by outcome,
refusals by reason, conversions by source format, review latency, claim templates made and swept.

One registry per process (`REGISTRY`), served on a plain-HTTP port of its own (`tessera webhook
--metrics-address`, admission/main.py). Every label is a closed set named here: a review's namespace, pod
name or message never becomes a label, so whatever anyone posts to the webhook, the series stay few. The
webhook's parts call the small functions below.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram

from admission.convert import names

P = "tessera_webhook_"
REGISTRY = CollectorRegistry(auto_describe=True)

OUTCOMES = ("converted", "unchanged", "refused", "error")
# a denial's status.reason (admission/review.py: deny) → its label; anything else would be a bug: "other"
REFUSAL_REASONS = {"Invalid": "invalid", "Conflict": "conflict"}
SOURCES = ("hami", "volcano-vgpu", "nvidia-dra", "none")
_DIALECT_SOURCE = {"hami": "hami", "volcano": "volcano-vgpu"}
# a review is answered in about a millisecond; the API server gives up at the webhook's timeoutSeconds (5)
_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0)

REVIEWS = Counter(
    f"{P}reviews_total", "Admission reviews answered, by outcome", ["outcome"], registry=REGISTRY
)
REFUSALS = Counter(
    f"{P}refusals_total",
    "Reviews refused, by reason (invalid: the request cannot be converted; conflict: a template of the "
    "conversion's name holds something else)",
    ["reason"],
    registry=REGISTRY,
)
CONVERSIONS = Counter(
    f"{P}conversions_total",
    "Reviews allowed, by the format converted from (none: nothing to convert)",
    ["source"],
    registry=REGISTRY,
)
REVIEW_SECONDS = Histogram(
    f"{P}review_duration_seconds", "Time to answer an admission review", buckets=_BUCKETS, registry=REGISTRY
)
TEMPLATES_MADE = Counter(
    f"{P}templates_made_total", "Claim templates the reconciler made for admitted pods", registry=REGISTRY
)
TEMPLATES_SWEPT = Counter(
    f"{P}templates_swept_total",
    "Claim templates the reconciler deleted once no live pod referenced them",
    registry=REGISTRY,
)
for _outcome in OUTCOMES:  # every series from the start: rate() and absent() need no first event
    REVIEWS.labels(_outcome)
for _reason in (*REFUSAL_REASONS.values(), "other"):
    REFUSALS.labels(_reason)
for _source in SOURCES:
    CONVERSIONS.labels(_source)


def source(review: Mapping[str, Any]) -> str:
    """The format the review's object asks in: a claim (or template) → nvidia-dra; a Pod → the dialect of
    the first container resource the conversion takes over (hami, volcano-vgpu); else none."""
    request = review.get("request")
    request = request if isinstance(request, Mapping) else {}
    kind = request.get("kind")
    if isinstance(kind, Mapping) and kind.get("kind") != "Pod":
        return "nvidia-dra"
    obj = request.get("object")
    spec = obj.get("spec") if isinstance(obj, Mapping) else None
    if not isinstance(spec, Mapping):
        return "none"
    for key in ("initContainers", "containers"):
        containers = spec.get(key)
        for c in containers if isinstance(containers, list) else ():
            resources = c.get("resources") if isinstance(c, Mapping) else None
            for section in ("limits", "requests"):
                asked = resources.get(section) if isinstance(resources, Mapping) else None
                for name in asked if isinstance(asked, Mapping) else ():
                    dialect = names.dialect_of(name) if isinstance(name, str) else None
                    if dialect is not None:
                        return _DIALECT_SOURCE.get(dialect.name, "none")
    return "none"


def count_review(review: Mapping[str, Any], answer: Mapping[str, Any], seconds: float) -> None:
    """One review answered with `answer` (admission.review.admit's) in `seconds`."""
    REVIEW_SECONDS.observe(seconds)
    response = answer.get("response")
    response = response if isinstance(response, Mapping) else {}
    if not response.get("allowed"):
        REVIEWS.labels("refused").inc()
        status = response.get("status")
        reason = status.get("reason") if isinstance(status, Mapping) else None
        REFUSALS.labels(REFUSAL_REASONS.get(reason, "other") if isinstance(reason, str) else "other").inc()
        return
    converted = bool(response.get("patch"))
    REVIEWS.labels("converted" if converted else "unchanged").inc()
    CONVERSIONS.labels(source(review) if converted else "none").inc()


def count_error(seconds: float) -> None:
    """A review the webhook failed on (answered 500)."""
    REVIEW_SECONDS.observe(seconds)
    REVIEWS.labels("error").inc()


def template_made() -> None:
    TEMPLATES_MADE.inc()


def template_swept() -> None:
    TEMPLATES_SWEPT.inc()
