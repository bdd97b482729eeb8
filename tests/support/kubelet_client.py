"""The kubelet's side of the plugin protocols over real unix sockets (tests, benchmark, e2e stand-ins)."""

from __future__ import annotations

import contextlib
import socket
import time
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType
from typing import Protocol, cast

import grpc

from kubelet_plugin.proto.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2,
    health_v1alpha1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)
from kubelet_plugin.record.results import ClaimRef

KUBELET_TIMEOUT_S = 45.0


class _Cancellable(Protocol):
    def cancel(self) -> bool: ...


@dataclass(frozen=True, slots=True)
class Registered:
    info: pluginregistration_pb2.PluginInfo


def is_served(path: Path) -> bool:
    """Whether something accepts connections on `path` (a stale socket file from a crash does not)."""
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as probe:
        try:
            probe.connect(str(path))
        except OSError:
            return False
        return True


def wait_for_socket(path: Path, timeout: float = 20.0) -> None:
    deadline = time.monotonic() + timeout
    while not is_served(path):
        if time.monotonic() > deadline:
            raise TimeoutError(f"nothing served {path} within {timeout}s")
        time.sleep(0.02)


def register(registration_socket: Path, *, accept: bool = True, error: str = "") -> Registered:
    """The kubelet's handshake: GetInfo, then NotifyRegistrationStatus."""
    with grpc.insecure_channel(f"unix://{registration_socket}") as channel:
        stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
        info = stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=10)
        stub.NotifyRegistrationStatus(
            pluginregistration_pb2.RegistrationStatus(plugin_registered=accept, error=error), timeout=10
        )
    return Registered(info=info)


def _claims_v1(claims: Sequence[ClaimRef]) -> list[dra_v1_pb2.Claim]:
    return [dra_v1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


def _claims_v1beta1(claims: Sequence[ClaimRef]) -> list[dra_v1beta1_pb2.Claim]:
    return [dra_v1beta1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims]


class DraClient:
    """One channel to the DRA socket, with v1 and v1beta1 stubs."""

    def __init__(self, dra_socket: Path) -> None:
        self._channel = grpc.insecure_channel(f"unix://{dra_socket}")
        self.v1 = dra_v1_pb2_grpc.DRAPluginStub(self._channel)
        self.v1beta1 = dra_v1beta1_pb2_grpc.DRAPluginStub(self._channel)
        self.health_v1 = health_v1_pb2_grpc.DRAResourceHealthStub(self._channel)
        self.health_v1alpha1 = health_v1alpha1_pb2_grpc.DRAResourceHealthStub(self._channel)

    def __enter__(self) -> DraClient:
        return self

    def __exit__(
        self, kind: type[BaseException] | None, value: BaseException | None, tb: TracebackType | None
    ) -> None:
        self.close()

    def close(self) -> None:
        self._channel.close()

    def prepare(
        self, claims: Sequence[ClaimRef], *, timeout: float = KUBELET_TIMEOUT_S
    ) -> dra_v1_pb2.NodePrepareResourcesResponse:
        request = dra_v1_pb2.NodePrepareResourcesRequest(claims=_claims_v1(claims))
        return self.v1.NodePrepareResources(request, timeout=timeout)

    def unprepare(
        self, claims: Sequence[ClaimRef], *, timeout: float = KUBELET_TIMEOUT_S
    ) -> dra_v1_pb2.NodeUnprepareResourcesResponse:
        request = dra_v1_pb2.NodeUnprepareResourcesRequest(claims=_claims_v1(claims))
        return self.v1.NodeUnprepareResources(request, timeout=timeout)

    def prepare_v1beta1(
        self, claims: Sequence[ClaimRef], *, timeout: float = KUBELET_TIMEOUT_S
    ) -> dra_v1beta1_pb2.NodePrepareResourcesResponse:
        request = dra_v1beta1_pb2.NodePrepareResourcesRequest(claims=_claims_v1beta1(claims))
        return self.v1beta1.NodePrepareResources(request, timeout=timeout)

    def unprepare_v1beta1(
        self, claims: Sequence[ClaimRef], *, timeout: float = KUBELET_TIMEOUT_S
    ) -> dra_v1beta1_pb2.NodeUnprepareResourcesResponse:
        request = dra_v1beta1_pb2.NodeUnprepareResourcesRequest(claims=_claims_v1beta1(claims))
        return self.v1beta1.NodeUnprepareResources(request, timeout=timeout)

    @contextlib.contextmanager
    def watch_health(
        self, *, timeout: float = 30.0
    ) -> Iterator[Iterator[health_v1_pb2.NodeWatchResourcesResponse]]:
        stream = self.health_v1.NodeWatchResources(health_v1_pb2.NodeWatchResourcesRequest(), timeout=timeout)
        try:
            yield iter(stream)
        finally:
            cast(_Cancellable, stream).cancel()

    @contextlib.contextmanager
    def watch_health_v1alpha1(
        self, *, timeout: float = 30.0
    ) -> Iterator[Iterator[health_v1alpha1_pb2.NodeWatchResourcesResponse]]:
        stream = self.health_v1alpha1.NodeWatchResources(
            health_v1alpha1_pb2.NodeWatchResourcesRequest(), timeout=timeout
        )
        try:
            yield iter(stream)
        finally:
            cast(_Cancellable, stream).cancel()
