"""The daemon's metrics plumbing: the endpoint's address, claim error reasons, MIG timing, health events."""

from __future__ import annotations

import pytest

from dra_driver.core.gpu_health import GpuCondition
from dra_driver.io.metrics_server import parse_address
from dra_driver.vocabulary.errors import (
    CLAIM_ERROR_REASONS,
    CdiSpecError,
    CheckpointError,
    ClaimDirectoryError,
    ClaimNotFoundError,
    ClaimReplacedError,
    ConfigError,
    InvalidNameError,
    MigError,
    NotAllocatedError,
    PlacementTakenError,
    StorageError,
    TesseraError,
)
from dra_driver.vocabulary.inventory import FaultKind, GpuFault
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin import metrics
from kubelet_plugin.health.events import GPU_RECOVERED_REASON, GPU_UNHEALTHY_REASON, change_message
from kubelet_plugin.record.results import PrepareResult
from kubelet_plugin.serving import dra_service


def test_addresses() -> None:
    assert parse_address(":9400") == ("", 9400)
    assert parse_address("127.0.0.1:0") == ("127.0.0.1", 0)
    assert parse_address("[::1]:9400") == ("::1", 9400)
    for bad in ("9400", "host:", "host:http", ":99999"):
        with pytest.raises(ConfigError, match="--metrics-address"):
            parse_address(bad)


def _subclasses(cls: type[TesseraError]) -> list[type[TesseraError]]:
    return [cls, *(c for sub in cls.__subclasses__() for c in _subclasses(sub))]


def test_claim_errors_are_counted_by_their_type() -> None:
    assert metrics.failure_reason(CheckpointError) == "checkpoint"
    assert metrics.failure_reason(ClaimNotFoundError("ResourceClaim ns/c not found")) == "claim_not_found"
    assert metrics.failure_reason(ClaimReplacedError) == "claim_replaced"
    assert metrics.failure_reason(PlacementTakenError("creating MIG instance: taken")) == "mig"
    assert metrics.failure_reason(ClaimDirectoryError) == "claim_directory"
    assert metrics.failure_reason(CdiSpecError) == "cdi"
    assert metrics.failure_reason(ConfigError) == "invalid_request"  # the claim's opaque config
    assert metrics.failure_reason(InvalidNameError) == "invalid_request"
    assert metrics.failure_reason(NotAllocatedError) == "not_allocated"
    assert metrics.failure_reason(KeyError("x")) == metrics.failure_reason(KeyError) == "internal"
    # the message is never read: a plain StorageError naming the checkpoint is still only `other`
    assert metrics.failure_reason(StorageError("checkpoint: disk full")) == "other"
    assert metrics.failure_reason(None) == "other"  # a failure known only by its message


def test_the_reasons_stay_a_small_fixed_set() -> None:
    reasons = {metrics.failure_reason(c) for c in [*_subclasses(TesseraError), KeyError]}
    assert reasons == set(CLAIM_ERROR_REASONS)


def test_the_kubelet_calls_count_each_failed_claim_by_its_cause() -> None:
    def count(reason: str) -> float:
        labels = {"call": "NodePrepareResources", "reason": reason}
        return metrics.REGISTRY.get_sample_value("tessera_claim_errors_total", labels) or 0.0

    before = {r: count(r) for r in ("mig", "invalid_request", "other")}
    dra_service._count(
        "NodePrepareResources",
        [
            PrepareResult.failed(MigError("creating MIG instance: NVML says no")),
            PrepareResult.failed(ConfigError("priority: must be an integer from 0 to 1")),
            PrepareResult(error="refused, with no error to say why"),
            PrepareResult(),
        ],
    )
    assert {r: count(r) - n for r, n in before.items()} == {"mig": 1, "invalid_request": 1, "other": 1}


def test_mig_operations_are_timed_and_failures_counted() -> None:
    def count(name: str, **labels: str) -> float:
        return metrics.REGISTRY.get_sample_value(name, labels) or 0.0

    before = count("tessera_mig_operation_duration_seconds_count", operation="create")
    failed = count("tessera_mig_operation_errors_total", operation="create")
    with metrics.timed_mig("create"):
        pass
    with pytest.raises(RuntimeError), metrics.timed_mig("create"):
        raise RuntimeError("no placement")
    assert count("tessera_mig_operation_duration_seconds_count", operation="create") == before + 2
    assert count("tessera_mig_operation_errors_total", operation="create") == failed + 1


def test_health_events_say_what_is_wrong_and_the_taint() -> None:
    sick = GpuCondition(GpuUUID("GPU-1"), 1, (GpuFault(FaultKind.LOST, xid=79),), since=5)
    reason, message, warning = change_message(None, sick)
    assert (reason, warning) == (GPU_UNHEALTHY_REASON, True)
    assert "XID 79" in message and "gpu.tessera.dev/unhealthy=lost:NoExecute" in message
    reason, message, warning = change_message(sick, GpuCondition(GpuUUID("GPU-1"), 1))
    assert (reason, warning) == (GPU_RECOVERED_REASON, False) and "recovered" in message


def test_a_taken_port_is_retried_until_the_other_instance_lets_it_go() -> None:
    import socket  # noqa: PLC0415
    import time  # noqa: PLC0415
    import urllib.request  # noqa: PLC0415

    from dra_driver.io.metrics_server import MetricsServer  # noqa: PLC0415

    holder = socket.socket()
    holder.bind(("127.0.0.1", 0))
    holder.listen()
    port = holder.getsockname()[1]
    server = MetricsServer(
        address=f"127.0.0.1:{port}", render=lambda: b"x 1\n", healthz=lambda: None, retry_s=0.05
    )
    server.start()
    try:
        time.sleep(0.2)
        assert not server.listening  # the old instance still has it: no failure, no endpoint yet
        holder.close()
        deadline = time.monotonic() + 5
        while not server.listening and time.monotonic() < deadline:
            time.sleep(0.05)
        assert server.listening
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=5) as answer:
            assert answer.read() == b"x 1\n"
    finally:
        server.stop()
        holder.close()
