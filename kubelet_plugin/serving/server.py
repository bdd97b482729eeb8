"""gRPC servers on the kubelet's unix sockets: one for registration, one for DRA and health.

The DRA socket is served before the registration socket appears, because the kubelet dials the endpoint
as soon as it has registered the plugin; on stop the registration socket goes first for the same reason.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent import futures
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from dra_driver.vocabulary.errors import StorageError
from kubelet_plugin.health.service import HealthBoard, HealthV1alpha1Servicer, HealthV1Servicer, StreamSlots
from kubelet_plugin.node.file_modes import SOCKET_MODE
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.node.sockets import BoundSocket, clear_stale_socket, record_bound, remove_socket
from kubelet_plugin.proto.gen import (
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2_grpc,
    health_v1_pb2_grpc,
    health_v1alpha1_pb2_grpc,
    pluginregistration_pb2_grpc,
)
from kubelet_plugin.serving.dra_service import ClaimCalls, DraV1beta1Servicer, DraV1Servicer
from kubelet_plugin.serving.registration import RegistrationServicer

log = structlog.get_logger(__name__)

# Workers for prepare/unprepare calls. Health streams hold a worker each for their lifetime; they get
# their own on top (health.StreamSlots), so open streams never take one of these.
DRA_WORKERS = 16
REGISTRATION_WORKERS = 2


@dataclass(frozen=True, slots=True)
class Services:
    registration: RegistrationServicer
    dra_v1: DraV1Servicer
    dra_v1beta1: DraV1beta1Servicer
    health_v1: HealthV1Servicer
    health_v1alpha1: HealthV1alpha1Servicer


def plugin_services(
    *,
    calls: ClaimCalls,
    board: HealthBoard,
    dra_socket: Path,
    on_registration: Callable[[bool], None] | None = None,
) -> Services:
    """What a plugin instance serves: registration naming `dra_socket` (the kubelet's verdicts told to
    `on_registration`), both DRA versions over `calls`, both health versions from `board` (one capacity for
    both versions' streams)."""
    streams = StreamSlots()
    return Services(
        registration=RegistrationServicer(dra_socket=dra_socket, on_outcome=on_registration),
        dra_v1=DraV1Servicer(calls),
        dra_v1beta1=DraV1beta1Servicer(calls),
        health_v1=HealthV1Servicer(board, slots=streams),
        health_v1alpha1=HealthV1alpha1Servicer(board, slots=streams),
    )


@dataclass(frozen=True, slots=True)
class _Running:
    server: grpc.Server
    socket: BoundSocket


def _serve(path: Path, server: grpc.Server) -> _Running:
    clear_stale_socket(path)
    try:
        server.add_insecure_port(f"unix://{path}")
    except RuntimeError as e:
        raise StorageError(f"cannot listen on {path}: {e}") from e
    server.start()
    try:
        os.chmod(path, SOCKET_MODE)  # the umask set it already; said again so no inherited one matters
    except OSError as e:
        server.stop(0)
        raise StorageError(f"cannot set the mode of {path}: {e.strerror or e}") from e
    log.info("serving", socket=str(path))
    return _Running(server=server, socket=record_bound(path))


class PluginServer:
    def __init__(self, *, paths: PluginPaths, services: Services) -> None:
        self._paths = paths
        self._services = services
        self._dra: _Running | None = None
        self._registration: _Running | None = None

    def start(self) -> None:
        s = self._services
        stream_slots = {id(x.slots): x.slots.capacity for x in (s.health_v1, s.health_v1alpha1)}
        workers = DRA_WORKERS + sum(stream_slots.values())
        dra = grpc.server(futures.ThreadPoolExecutor(max_workers=workers, thread_name_prefix="dra"))
        dra_v1_pb2_grpc.add_DRAPluginServicer_to_server(s.dra_v1, dra)
        dra_v1beta1_pb2_grpc.add_DRAPluginServicer_to_server(s.dra_v1beta1, dra)
        health_v1_pb2_grpc.add_DRAResourceHealthServicer_to_server(s.health_v1, dra)
        health_v1alpha1_pb2_grpc.add_DRAResourceHealthServicer_to_server(s.health_v1alpha1, dra)
        self._dra = _serve(self._paths.dra_socket, dra)

        reg = grpc.server(
            futures.ThreadPoolExecutor(max_workers=REGISTRATION_WORKERS, thread_name_prefix="registration")
        )
        pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(s.registration, reg)
        try:
            self._registration = _serve(self._paths.registration_socket, reg)
        except Exception:
            self.stop(grace=0)
            raise

    def stop(self, *, grace: float) -> None:
        """Stop accepting calls, let running ones finish for `grace` seconds, remove our sockets."""
        for running in (self._registration, self._dra):
            if running is None:
                continue
            running.server.stop(grace).wait()
            if remove_socket(running.socket):
                log.info("removed socket", socket=str(running.socket.path))
        self._registration = None
        self._dra = None

    def wait(self, timeout: float | None = None) -> bool:
        """Block until the DRA server terminates (True) or `timeout` passes (False)."""
        return self._dra is None or self._dra.server.wait_for_termination(timeout)
