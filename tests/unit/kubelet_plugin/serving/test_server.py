"""The two gRPC servers on their unix sockets: start order, stale sockets, a second instance, clean stop."""

from __future__ import annotations

import os
import shutil
import socket
import tempfile
from collections.abc import Iterator, Sequence
from pathlib import Path

import grpc
import pytest

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.health.service import HealthBoard, HealthV1alpha1Servicer, HealthV1Servicer
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.proto.gen import pluginregistration_pb2, pluginregistration_pb2_grpc
from kubelet_plugin.record.results import ClaimRef, PrepareResult, UnprepareResult
from kubelet_plugin.serving.dra_service import ClaimCalls, DraV1beta1Servicer, DraV1Servicer
from kubelet_plugin.serving.registration import RegistrationServicer
from kubelet_plugin.serving.server import PluginServer, Services


class NothingPreparer:
    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]:
        return {c.uid: PrepareResult() for c in claims}

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]:
        return {c.uid: UnprepareResult() for c in claims}


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def make_server(paths: PluginPaths) -> PluginServer:
    paths.plugin_dir.mkdir(parents=True, exist_ok=True)
    calls = ClaimCalls(preparer=NothingPreparer(), lock=PluginLock(paths.lock_file))
    board = HealthBoard(pool="node-a")
    return PluginServer(
        paths=paths,
        services=Services(
            registration=RegistrationServicer(dra_socket=paths.dra_socket),
            dra_v1=DraV1Servicer(calls),
            dra_v1beta1=DraV1beta1Servicer(calls),
            health_v1=HealthV1Servicer(board),
            health_v1alpha1=HealthV1alpha1Servicer(board),
        ),
    )


def test_start_serves_both_sockets_and_stop_removes_them(root: Path) -> None:
    paths = PluginPaths.under(root)
    server = make_server(paths)
    server.start()
    try:
        with grpc.insecure_channel(f"unix://{paths.registration_socket}") as ch:
            info = pluginregistration_pb2_grpc.RegistrationStub(ch).GetInfo(
                pluginregistration_pb2.InfoRequest(), timeout=5
            )
        assert info.endpoint == str(paths.dra_socket)
        assert paths.dra_socket.exists()
    finally:
        server.stop(grace=1)
    assert not paths.dra_socket.exists()
    assert not paths.registration_socket.exists()


def test_stale_sockets_from_a_crash_are_replaced(root: Path) -> None:
    paths = PluginPaths.under(root)
    for path in (paths.dra_socket, paths.registration_socket):
        path.parent.mkdir(parents=True, exist_ok=True)
        with socket.socket(socket.AF_UNIX) as s:
            s.bind(os.fspath(path))
    server = make_server(paths)
    server.start()
    server.stop(grace=0)
    assert not paths.dra_socket.exists()


def test_a_second_instance_needs_its_own_pod_uid(root: Path) -> None:
    first = make_server(PluginPaths.under(root))
    first.start()
    try:
        with pytest.raises(ConfigError, match="another process is serving"):
            make_server(PluginPaths.under(root)).start()
        second_paths = PluginPaths.under(root, pod_uid="pod-2")
        second = make_server(second_paths)
        second.start()
        assert second_paths.registration_socket.name == "gpu.tessera.dev-pod-2-reg.sock"
        second.stop(grace=0)
    finally:
        first.stop(grace=0)
