"""Device health: the inventory → health mapping, the board, the poller, and the stream over a real socket."""

from __future__ import annotations

import shutil
import tempfile
import threading
from collections.abc import Iterator
from concurrent import futures
from dataclasses import replace
from pathlib import Path
from typing import Protocol, cast

import grpc
import pytest

from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.errors import InventoryError
from dra_driver.vocabulary.inventory import Architecture, Gpu, Inventory, MigProfile
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin import metrics
from kubelet_plugin.health.service import (
    DeviceHealthState,
    Health,
    HealthBoard,
    HealthV1alpha1Servicer,
    HealthV1Servicer,
    InventoryHealthPoller,
    health_of,
)
from kubelet_plugin.proto.gen import (
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
)


class _Cancellable(Protocol):
    def cancel(self) -> bool: ...


ONE_G = MigProfile(
    profile_id=19,
    name="1g.10gb",
    memory_mib=9856,
    multiprocessors=16,
    compute_slices=1,
    memory_slices=1,
    copy_engines=1,
    decoders=1,
    encoders=0,
    jpeg_engines=1,
    ofa_engines=0,
    max_instances=7,
    placement_starts=(0, 1, 2, 3, 4, 5, 6),
)


def gpu(index: int, *, mig: bool, healthy: bool = True) -> Gpu:
    return Gpu(
        index=index,
        uuid=GpuUUID(f"GPU-{index:08d}"),
        product_name="NVIDIA H100 80GB HBM3",
        brand="Nvidia",
        architecture=Architecture.HOPPER,
        cuda_compute_capability="9.0",
        memory_bytes=80 * 2**30,
        multiprocessors=132,
        pci_bus_id=f"0000:{index:02x}:00.0",
        device_node=DeviceNode(f"/dev/nvidia{index}", 195, index),
        mig_capable=mig,
        mig_profiles=(ONE_G,) if mig else (),
        healthy=healthy,
    )


def inventory(*gpus: Gpu) -> Inventory:
    return Inventory(driver_version="550.54.15", cuda_driver_version="12.4", gpus=gpus)


def test_every_device_of_a_gpu_shares_its_health() -> None:
    states = health_of(inventory(gpu(0, mig=True), gpu(1, mig=False, healthy=False)))
    by_name: dict[str, DeviceHealthState] = {s.device: s for s in states}
    assert set(by_name) == {
        "gpu-0",
        "gpu-0-vgpu",
        "gpu-0-mps",
        *(f"gpu-0-mig-1g10gb-{k}" for k in range(7)),
        "gpu-1",
        "gpu-1-vgpu",
        "gpu-1-mps",
    }
    assert {s.health for n, s in by_name.items() if n.startswith("gpu-0")} == {Health.HEALTHY}
    assert by_name["gpu-1-vgpu"].health is Health.UNHEALTHY
    assert "GPU-00000001" in by_name["gpu-1"].message


def test_the_board_moves_only_on_change() -> None:
    board = HealthBoard(pool="node-a")
    states = health_of(inventory(gpu(0, mig=False)))
    assert board.post(states, checked_at=100) is True
    assert board.post(states, checked_at=200) is False
    got = board.wait(after=0, timeout=0)
    assert got is not None
    version, report = got
    assert (version, report.checked_at, report.pool) == (1, 200, "node-a")
    same = board.wait(after=version, timeout=0.01)  # heartbeat: unchanged version, current report
    assert same is not None and same[0] == version
    board.close()
    assert board.wait(after=version, timeout=5) is None


def test_the_poller_reports_unknown_when_the_backend_fails() -> None:
    board = HealthBoard(pool="node-a")
    healthy = inventory(gpu(0, mig=False))
    failing = False

    def read() -> Inventory:
        if failing:
            raise InventoryError("NVML: GPU is lost")
        return healthy

    poller = InventoryHealthPoller(read=read, board=board)
    poller.poll_once()
    failing = True
    poller.poll_once()
    report = board.current
    assert report is not None
    assert [(d.device, d.health) for d in report.devices] == [
        ("gpu-0", Health.UNKNOWN),
        ("gpu-0-vgpu", Health.UNKNOWN),
        ("gpu-0-mps", Health.UNKNOWN),
    ]
    assert "GPU is lost" in report.devices[0].message


def test_every_check_is_counted_once_its_outcome_is_posted() -> None:
    def checks(result: str) -> float:
        return metrics.REGISTRY.get_sample_value("tessera_health_checks_total", {"result": result}) or 0.0

    board = HealthBoard(pool="node-a")
    failing = False

    def read() -> Inventory:
        if failing:
            raise InventoryError("NVML: GPU is lost")
        return inventory(gpu(0, mig=False))

    ok, failed = checks("ok"), checks("failed")
    seen: list[float] = []
    poller = InventoryHealthPoller(read=read, board=board, on_change=lambda: seen.append(checks("ok")))
    poller.poll_once()
    assert seen == [ok] and checks("ok") == ok + 1  # the change was posted before the check counted
    poller.poll_once()  # nothing changed: no log, no new board version; only the count shows it ran
    assert (len(seen), checks("ok")) == (1, ok + 2)
    failing = True
    poller.poll_once()
    assert (checks("ok"), checks("failed")) == (ok + 2, failed + 1)


@pytest.fixture
def stream_server() -> Iterator[tuple[HealthBoard, grpc.Channel]]:
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    board = HealthBoard(pool="node-a")
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=4))
    health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(HealthV1Servicer(board, heartbeat=0.2), server)
    health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(
        HealthV1alpha1Servicer(board, heartbeat=0.2), server
    )
    server.add_insecure_port(f"unix://{root}/dra.sock")
    server.start()
    with grpc.insecure_channel(f"unix://{root}/dra.sock") as channel:
        yield board, channel
    board.close()
    server.stop(1).wait()
    shutil.rmtree(root)


def test_v1_stream_sends_the_full_list_then_changes(stream_server: tuple[HealthBoard, grpc.Channel]) -> None:
    board, channel = stream_server
    inv = inventory(gpu(0, mig=False), gpu(1, mig=False))
    board.post(health_of(inv), checked_at=1000)
    stream = health_v1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        health_v1_pb2.NodeWatchResourcesRequest(), timeout=10
    )
    responses = iter(stream)
    first = next(responses)
    assert [(d.device.pool_name, d.device.device_name, d.health) for d in first.devices] == [
        ("node-a", "gpu-0", health_v1_pb2.HEALTHY),
        ("node-a", "gpu-0-vgpu", health_v1_pb2.HEALTHY),
        ("node-a", "gpu-0-mps", health_v1_pb2.HEALTHY),
        ("node-a", "gpu-1", health_v1_pb2.HEALTHY),
        ("node-a", "gpu-1-vgpu", health_v1_pb2.HEALTHY),
        ("node-a", "gpu-1-mps", health_v1_pb2.HEALTHY),
    ]
    assert first.devices[0].last_updated_time == 1000
    assert first.devices[0].health_check_timeout_seconds > 0

    sick = replace(inv, gpus=(inv.gpus[0], replace(inv.gpus[1], healthy=False)))
    threading.Timer(0.05, lambda: board.post(health_of(sick), checked_at=1005)).start()
    update = next(r for r in responses if any(d.health == health_v1_pb2.UNHEALTHY for d in r.devices))
    assert len(update.devices) == 6  # still the complete list
    bad = {d.device.device_name: d.message for d in update.devices if d.health == health_v1_pb2.UNHEALTHY}
    assert set(bad) == {"gpu-1", "gpu-1-vgpu", "gpu-1-mps"}
    assert "GPU-00000001" in bad["gpu-1"]
    cast(_Cancellable, stream).cancel()


def test_v1alpha1_stream_and_heartbeat(stream_server: tuple[HealthBoard, grpc.Channel]) -> None:
    board, channel = stream_server
    board.post(health_of(inventory(gpu(0, mig=False))), checked_at=7)
    stream = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(channel).NodeWatchResources(
        health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=10
    )
    responses = iter(stream)
    first, second = next(responses), next(responses)  # the second comes from the 0.2 s heartbeat
    assert [d.device.device_name for d in first.devices] == ["gpu-0", "gpu-0-vgpu", "gpu-0-mps"]
    assert first == second
    cast(_Cancellable, stream).cancel()
