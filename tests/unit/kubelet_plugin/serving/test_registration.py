"""The registration servicer over a real unix socket: the kubelet's two-call handshake."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path

import grpc
import pytest

from kubelet_plugin.proto.gen import pluginregistration_pb2 as pb
from kubelet_plugin.proto.gen import pluginregistration_pb2_grpc as pb_grpc
from kubelet_plugin.serving.registration import RegistrationOutcome, RegistrationServicer


@pytest.fixture
def served() -> Iterator[tuple[RegistrationServicer, pb_grpc.RegistrationStub]]:
    root = Path(tempfile.mkdtemp(prefix="ts-", dir="/tmp"))
    servicer = RegistrationServicer(dra_socket=Path("/var/lib/kubelet/plugins/gpu.tessera.dev/dra.sock"))
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
    pb_grpc.add_RegistrationServicer_to_server(servicer, server)
    server.add_insecure_port(f"unix://{root}/reg.sock")
    server.start()
    with grpc.insecure_channel(f"unix://{root}/reg.sock") as channel:
        yield servicer, pb_grpc.RegistrationStub(channel)
    server.stop(0).wait()
    shutil.rmtree(root)


def test_get_info_names_the_driver_endpoint_and_versions(
    served: tuple[RegistrationServicer, pb_grpc.RegistrationStub],
) -> None:
    _, stub = served
    info = stub.GetInfo(pb.InfoRequest(), timeout=5)
    assert info.type == "DRAPlugin"
    assert info.name == "gpu.tessera.dev"
    assert info.endpoint == "/var/lib/kubelet/plugins/gpu.tessera.dev/dra.sock"
    assert list(info.supported_versions) == [
        "v1.DRAPlugin",
        "v1beta1.DRAPlugin",
        "v1.DRAResourceHealth",
        "v1alpha1.DRAResourceHealth",
    ]


def test_registration_status_is_recorded(
    served: tuple[RegistrationServicer, pb_grpc.RegistrationStub],
) -> None:
    servicer, stub = served
    assert servicer.outcome is None
    assert servicer.wait_for_outcome(0.05) is None
    stub.NotifyRegistrationStatus(
        pb.RegistrationStatus(plugin_registered=False, error="version mismatch"), timeout=5
    )
    assert servicer.wait_for_outcome(1) == RegistrationOutcome(registered=False, error="version mismatch")
    stub.NotifyRegistrationStatus(pb.RegistrationStatus(plugin_registered=True), timeout=5)
    assert servicer.outcome == RegistrationOutcome(registered=True, error="")


def test_a_relative_endpoint_is_refused() -> None:
    with pytest.raises(ValueError, match="absolute"):
        RegistrationServicer(dra_socket=Path("dra.sock"))
