"""The node daemon's own Prometheus metrics: what its parts count as they work (docs/metrics.md).

One registry per process (`REGISTRY`); the scrape-time families of allocation, usage and health are added to
it by `kubelet_plugin.observability.node_metrics`. Every name has the `tessera_` prefix and a base unit;
counters end in `_total`. The parts call the small functions below, so none of them imports prometheus_client.
"""

from __future__ import annotations

import time
from collections.abc import Iterator
from contextlib import contextmanager

from prometheus_client import CollectorRegistry, Counter, Histogram

from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.names import METRICS_PREFIX as P

REGISTRY = CollectorRegistry(auto_describe=True)

# kubelet calls take milliseconds to seconds; a MIG instance from well under a second to tens of seconds
_CALL_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 45.0)
_MIG_BUCKETS = (0.01, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0)

KUBELET_CALL_SECONDS = Histogram(
    f"{P}kubelet_call_duration_seconds",
    "Time to answer a NodePrepareResources or NodeUnprepareResources call, by call",
    ["call"],
    buckets=_CALL_BUCKETS,
    registry=REGISTRY,
)
CLAIM_ERRORS = Counter(
    f"{P}claim_errors_total",
    "Claims answered with an error, by call and reason",
    ["call", "reason"],
    registry=REGISTRY,
)
CLAIMS_HANDLED = Counter(
    f"{P}claims_total", "Claims the kubelet asked about, by call", ["call"], registry=REGISTRY
)
MIG_SECONDS = Histogram(
    f"{P}mig_operation_duration_seconds",
    "Time to create (GPU and compute instance) or destroy a MIG instance, by operation",
    ["operation"],
    buckets=_MIG_BUCKETS,
    registry=REGISTRY,
)
MIG_ERRORS = Counter(
    f"{P}mig_operation_errors_total",
    "MIG operations that failed, by operation",
    ["operation"],
    registry=REGISTRY,
)
SLICE_WRITES = Counter(
    f"{P}slice_publisher_writes_total",
    "ResourceSlice writes, by verb (create, update, delete)",
    ["verb"],
    registry=REGISTRY,
)
SLICE_CONFLICTS = Counter(
    f"{P}slice_publisher_conflicts_total", "ResourceSlice writes answered 409 Conflict", registry=REGISTRY
)
SLICE_RESYNCS = Counter(
    f"{P}slice_publisher_resyncs_total",
    "Publications of the pool, by trigger (periodic, requested: health/MIG/prepare, foreign: someone else "
    "changed the pool)",
    ["trigger"],
    registry=REGISTRY,
)
SLICE_ERRORS = Counter(
    f"{P}slice_publisher_errors_total", "Publications that failed and will be retried", registry=REGISTRY
)
CHECKPOINT_WRITES = Counter(f"{P}checkpoint_writes_total", "Checkpoint saves (durable)", registry=REGISTRY)
CHECKPOINT_ERRORS = Counter(
    f"{P}checkpoint_write_errors_total", "Checkpoint saves that failed", registry=REGISTRY
)
HEALTH_CHECKS = Counter(
    f"{P}health_checks_total",
    "Health checks of the node's GPUs, by result (ok, failed: the devices are reported Unknown)",
    ["result"],
    registry=REGISTRY,
)
MPS_RESTARTS = Counter(
    f"{P}mps_daemon_restarts_total",
    "MPS control daemons the watch found dead, mute or replaced, by result (replaced, failed)",
    ["result"],
    registry=REGISTRY,
)
STATUS_WRITES = Counter(
    f"{P}claim_status_writes_total",
    "Writes of status.devices on ResourceClaims, by kind (usage) and result (ok, error)",
    ["kind", "result"],
    registry=REGISTRY,
)


def failure_reason(cause: BaseException | type[BaseException] | None) -> str:
    """The `reason` label of a claim that failed with `cause` (an error or its type): our own errors name
    theirs (`TesseraError.reason`, one of CLAIM_ERROR_REASONS), anything else is `internal` (a bug; the
    message points at the plugin log). None, a failure known only by its message (the cleanup instance's
    refusal to prepare), counts as `other`: a message is never parsed for a label."""
    if cause is None:
        return "other"
    kind = cause if isinstance(cause, type) else type(cause)
    return kind.reason if issubclass(kind, TesseraError) else "internal"


@contextmanager
def timed_mig(operation: str) -> Iterator[None]:
    """Times a MIG operation into MIG_SECONDS; a failure counts in MIG_ERRORS (and is re-raised)."""
    start = time.perf_counter()
    try:
        yield
    except Exception:
        MIG_ERRORS.labels(operation).inc()
        raise
    finally:
        MIG_SECONDS.labels(operation).observe(time.perf_counter() - start)
