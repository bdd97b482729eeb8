"""Reading the kubelet's DRA counters from Prometheus text."""

from __future__ import annotations

from e2e.realnode.metrics import parse_dra_counts, samples

PREPARE = "/k8s.io.kubelet.pkg.apis.dra.v1.DRAPlugin/NodePrepareResources"
OPS = "dra_operations_duration_seconds"
GRPC = "dra_grpc_operations_duration_seconds_count"
TEXT = f"""\
# HELP {OPS} Latency histogram ...
# TYPE {OPS} histogram
{OPS}_bucket{{is_error="false",operation_name="PrepareResources",le="0.1"}} 3
{OPS}_count{{is_error="false",operation_name="PrepareResources"}} 7
{OPS}_count{{is_error="true",operation_name="PrepareResources"}} 2
{OPS}_count{{is_error="false",operation_name="UnprepareResources"}} 5
{GRPC}{{driver_name="gpu.tessera.dev",grpc_status_code="OK",method_name="{PREPARE}"}} 7
{GRPC}{{driver_name="gpu.tessera.dev",grpc_status_code="Unavailable",method_name="{PREPARE}"}} 2
{GRPC}{{driver_name="other.dev",grpc_status_code="Unknown",method_name="x"}} 9
"""


def test_samples_with_labels() -> None:
    found = samples(TEXT, "dra_operations_duration_seconds_count")
    assert ({"is_error": "true", "operation_name": "PrepareResources"}, 2.0) in found
    assert len(found) == 3


def test_counts_and_their_difference() -> None:
    counts = parse_dra_counts(TEXT, driver="gpu.tessera.dev")
    assert counts.operation("PrepareResources", failed=False) == 7
    assert counts.operation("PrepareResources", failed=True) == 2
    assert counts.operation("UnprepareResources", failed=True) == 0
    assert counts.failed_grpc() == 2  # the other driver's calls are not ours
    assert counts.grpc_calls() == {"NodePrepareResources": 9}
    later = parse_dra_counts(TEXT.replace("} 7\n", "} 10\n"), driver="gpu.tessera.dev")
    delta = later - counts
    assert delta.operation("PrepareResources", failed=False) == 3
    assert delta.operation("PrepareResources", failed=True) == 0 and delta.failed_grpc() == 0
