"""The DRAPlugin servicers over a real unix socket, backed by a small in-memory preparer."""

from __future__ import annotations

import fcntl
import os
import shutil
import tempfile
import threading
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from dra_driver.vocabulary.errors import ClaimNotFoundError
from dra_driver.vocabulary.names import ClaimUID, cdi_device_name, cdi_qualified_name
from kubelet_plugin.health.service import HealthBoard, HealthV1alpha1Servicer, HealthV1Servicer
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.proto.gen import dra_v1_pb2, dra_v1_pb2_grpc, dra_v1beta1_pb2, dra_v1beta1_pb2_grpc
from kubelet_plugin.record.results import ClaimRef, PreparedDevice, PrepareResult, UnprepareResult
from kubelet_plugin.serving.dra_service import ClaimCalls, DraV1beta1Servicer, DraV1Servicer
from kubelet_plugin.serving.registration import RegistrationServicer
from kubelet_plugin.serving.server import PluginServer, Services


class LedgerPreparer:
    """Prepares a vgpu device per claim and remembers it; a few claim names misbehave on purpose."""

    def __init__(self) -> None:
        self.prepared: dict[ClaimUID, ClaimRef] = {}
        self.calls: list[tuple[str, ...]] = []
        self.lock = threading.Lock()

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        with self.lock:
            self.calls.append(tuple(c.uid for c in claims))
        if any(c.name == "boom" for c in claims):
            raise RuntimeError("disk on fire")
        out: dict[ClaimUID, PrepareResult] = {}
        for c in claims:
            if c.name == "silent":
                continue
            if c.name == "missing":
                out[c.uid] = PrepareResult(
                    error=str(ClaimNotFoundError(f"claim {c.namespace}/{c.name} not found"))
                )
                continue
            self.prepared[c.uid] = c
            cdi = cdi_qualified_name(cdi_device_name(c.uid, "gpu-0-vgpu", "share-1"))
            out[c.uid] = PrepareResult(
                devices=(PreparedDevice(("gpu",), "node-a", "gpu-0-vgpu", (cdi,), share_id="share-1"),)
            )
        return out

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]:
        if any(c.name == "boom" for c in claims):
            raise ClaimNotFoundError("checkpoint unreadable")
        for c in claims:
            self.prepared.pop(c.uid, None)
        return {c.uid: UnprepareResult() for c in claims if c.name != "silent"}


@pytest.fixture
def root() -> Iterator[Path]:
    # pytest's tmp_path is too long for a unix socket path (108 bytes)
    path = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def preparer() -> LedgerPreparer:
    return LedgerPreparer()


@pytest.fixture
def paths(root: Path) -> PluginPaths:
    p = PluginPaths.under(root)
    p.plugin_dir.mkdir(parents=True)
    return p


@pytest.fixture
def channel(paths: PluginPaths, preparer: LedgerPreparer) -> Iterator[grpc.Channel]:
    calls = ClaimCalls(preparer=preparer, lock=PluginLock(paths.lock_file))
    board = HealthBoard(pool="node-a")
    server = PluginServer(
        paths=paths,
        services=Services(
            registration=RegistrationServicer(dra_socket=paths.dra_socket),
            dra_v1=DraV1Servicer(calls),
            dra_v1beta1=DraV1beta1Servicer(calls),
            health_v1=HealthV1Servicer(board),
            health_v1alpha1=HealthV1alpha1Servicer(board),
        ),
    )
    server.start()
    with grpc.insecure_channel(f"unix://{paths.dra_socket}") as ch:
        yield ch
    board.close()
    server.stop(grace=1)


def claim(name: str, uid: str, namespace: str = "default") -> dra_v1_pb2.Claim:
    return dra_v1_pb2.Claim(namespace=namespace, name=name, uid=uid)


def test_v1_prepare_answers_with_devices_and_share_ids(
    channel: grpc.Channel, preparer: LedgerPreparer
) -> None:
    stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
    resp = stub.NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim("a", "uid-a")]), timeout=5
    )
    entry = resp.claims["uid-a"]
    assert entry.error == ""
    [device] = entry.devices
    assert (device.pool_name, device.device_name, list(device.request_names)) == (
        "node-a",
        "gpu-0-vgpu",
        ["gpu"],
    )
    assert list(device.cdi_device_ids) == ["k8s.gpu.tessera.dev/claim=uid-a-gpu-0-vgpu-share-1"]
    assert device.HasField("share_id") and device.share_id == "share-1"
    assert "uid-a" in preparer.prepared


def test_v1beta1_prepare_and_unprepare(channel: grpc.Channel, preparer: LedgerPreparer) -> None:
    stub = dra_v1beta1_pb2_grpc.DRAPluginStub(channel)
    req = dra_v1beta1_pb2.NodePrepareResourcesRequest(
        claims=[dra_v1beta1_pb2.Claim(namespace="ns", name="b", uid="uid-b")]
    )
    resp = stub.NodePrepareResources(req, timeout=5)
    [device] = resp.claims["uid-b"].devices
    assert device.device_name == "gpu-0-vgpu"
    assert "share_id" not in dra_v1beta1_pb2.Device.DESCRIPTOR.fields_by_name
    unreq = dra_v1beta1_pb2.NodeUnprepareResourcesRequest(claims=list(req.claims))
    assert stub.NodeUnprepareResources(unreq, timeout=5).claims["uid-b"].error == ""
    assert preparer.prepared == {}


def test_every_claim_gets_an_answer(channel: grpc.Channel) -> None:
    stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
    claims = [
        claim("ok", "u1"),
        claim("missing", "u2"),
        claim("silent", "u3"),
        claim("nouid", ""),
        claim("", "u5"),
    ]
    resp = stub.NodePrepareResources(dra_v1_pb2.NodePrepareResourcesRequest(claims=claims), timeout=5)
    assert set(resp.claims) == {"u1", "u2", "u3", "", "u5"}
    assert resp.claims["u1"].error == "" and len(resp.claims["u1"].devices) == 1
    assert "not found" in resp.claims["u2"].error
    assert "did not prepare claim u3" in resp.claims["u3"].error
    assert "lacks uid" in resp.claims[""].error
    assert "lacks name" in resp.claims["u5"].error
    assert all(not resp.claims[u].devices for u in ("u2", "u3", "", "u5"))


def test_a_crashing_preparer_fails_each_claim_and_the_daemon_keeps_serving(
    channel: grpc.Channel, preparer: LedgerPreparer
) -> None:
    stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
    resp = stub.NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim("boom", "u1"), claim("fine", "u2")]), timeout=5
    )
    for uid in ("u1", "u2"):
        assert "internal error in the node plugin (RuntimeError: disk on fire)" in resp.claims[uid].error
    unresp = stub.NodeUnprepareResources(
        dra_v1_pb2.NodeUnprepareResourcesRequest(claims=[claim("boom", "u1")]), timeout=5
    )
    assert unresp.claims["u1"].error == "checkpoint unreadable"  # Tessera errors pass through as they are
    again = stub.NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim("fine", "u2")]), timeout=5
    )
    assert again.claims["u2"].error == ""


def test_repeated_claims_in_one_call_are_prepared_once(
    channel: grpc.Channel, preparer: LedgerPreparer
) -> None:
    stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
    resp = stub.NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim("a", "u1"), claim("a", "u1")]), timeout=5
    )
    assert list(resp.claims) == ["u1"]
    assert preparer.calls == [("u1",)]


def test_calls_wait_for_the_plugin_lock(
    channel: grpc.Channel, paths: PluginPaths, preparer: LedgerPreparer
) -> None:
    stub = dra_v1_pb2_grpc.DRAPluginStub(channel)
    fd = os.open(paths.lock_file, os.O_RDWR | os.O_CREAT)
    try:
        fcntl.flock(fd, fcntl.LOCK_EX)  # another instance holding the lock
        with pytest.raises(grpc.RpcError) as info:
            stub.NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim("a", "u1")]), timeout=0.5
            )
        assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
    finally:
        os.close(fd)
    resp = stub.NodePrepareResources(
        dra_v1_pb2.NodePrepareResourcesRequest(claims=[claim("a", "u2")]), timeout=5
    )
    assert resp.claims["u2"].error == ""


class CheckpointingPreparer(LedgerPreparer):
    """Writes its ledger to a file the way the real preparer saves its checkpoint (replace by rename)."""

    def __init__(self, path: Path) -> None:
        super().__init__()
        self.path = path
        self.reloads = 0

    def reload(self) -> None:
        self.reloads += 1

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        out = super().prepare(claims)
        tmp = self.path.with_suffix(".tmp")
        tmp.write_text("\n".join(sorted(self.prepared)))
        tmp.replace(self.path)
        return out


def test_the_preparer_rereads_state_another_instance_changed(paths: PluginPaths) -> None:
    checkpoint = paths.plugin_dir / "checkpoint.json"
    preparer = CheckpointingPreparer(checkpoint)
    after: list[int] = []
    calls = ClaimCalls(
        preparer=preparer,
        lock=PluginLock(paths.lock_file),
        shared_state=checkpoint,
        reload=preparer.reload,
        after=lambda: after.append(1),
    )
    ref = ClaimRef(namespace="ns", name="a", uid=ClaimUID("u1"))
    calls.prepare([ref])
    assert preparer.reloads == 1  # nothing is known about the state at the first call
    calls.prepare([ref])
    calls.unprepare([ref])
    assert preparer.reloads == 1  # we left it as it is
    other = checkpoint.with_name("other")
    other.write_text("written by the other pod")
    other.replace(checkpoint)
    calls.unprepare([ref])
    assert preparer.reloads == 2
    assert len(after) == 4
    calls.prepare([ClaimRef(namespace="ns", name="", uid=ClaimUID("u2"))])  # rejected before the preparer
    assert len(after) == 4
