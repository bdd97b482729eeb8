"""Plugin discovery and the DRA gRPC client, as the kubelet does them: watch the registry directory for
sockets, ask each `GetInfo`, pick the newest DRA API both sides speak (v1 over v1beta1), answer
`NotifyRegistrationStatus`, and call NodePrepareResources / NodeUnprepareResources on the endpoint."""

from __future__ import annotations

import threading
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from e2e.kubelet_standin.errors import PluginUnavailableError, StandInError
from e2e.kubelet_standin.pod_claims import PreparedDevice
from kubelet_plugin.proto.gen import (
    dra_v1_pb2,
    dra_v1_pb2_grpc,
    dra_v1beta1_pb2,
    dra_v1beta1_pb2_grpc,
    pluginregistration_pb2,
    pluginregistration_pb2_grpc,
)

log = structlog.get_logger(__name__)

PLUGIN_TYPE = "DRAPlugin"
# What this kubelet speaks, newest first; the first one the plugin also offers is used.
DRA_VERSIONS = ("v1", "v1beta1")
CALL_TIMEOUT_S = 45.0  # the kubelet's NodePrepareResources timeout
REGISTRATION_TIMEOUT_S = 10.0


@dataclass(frozen=True, slots=True)
class ClaimKey:
    namespace: str
    name: str
    uid: str


@dataclass(frozen=True, slots=True)
class PrepareAnswer:
    devices: tuple[PreparedDevice, ...]
    error: str


def choose_version(supported: Sequence[str]) -> str | None:
    offered = {v.removesuffix(f".{PLUGIN_TYPE}") for v in supported if v.endswith(f".{PLUGIN_TYPE}")}
    return next((v for v in DRA_VERSIONS if v in offered), None)


class DraConnection:
    """One channel to a plugin's DRA socket, speaking the negotiated version."""

    def __init__(self, *, driver: str, endpoint: Path, version: str) -> None:
        self.driver = driver
        self.endpoint = endpoint
        self.version = version
        self._channel = grpc.insecure_channel(f"unix://{endpoint}")
        self._v1 = dra_v1_pb2_grpc.DRAPluginStub(self._channel)
        self._v1beta1 = dra_v1beta1_pb2_grpc.DRAPluginStub(self._channel)

    def close(self) -> None:
        self._channel.close()

    def prepare(self, claims: Sequence[ClaimKey]) -> dict[str, PrepareAnswer]:
        response: dra_v1_pb2.NodePrepareResourcesResponse | dra_v1beta1_pb2.NodePrepareResourcesResponse
        try:
            if self.version == "v1":
                response = self._v1.NodePrepareResources(
                    dra_v1_pb2.NodePrepareResourcesRequest(
                        claims=[
                            dra_v1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims
                        ]
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
            else:
                response = self._v1beta1.NodePrepareResources(
                    dra_v1beta1_pb2.NodePrepareResourcesRequest(
                        claims=[
                            dra_v1beta1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid)
                            for c in claims
                        ]
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
        except grpc.RpcError as e:
            raise StandInError(f"NodePrepareResources on {self.endpoint} failed: {e}") from e
        answers: dict[str, PrepareAnswer] = {}
        for claim in claims:
            if claim.uid not in response.claims:
                # The kubelet treats a claim left out of the answer as failed.
                answers[claim.uid] = PrepareAnswer(
                    devices=(), error="the plugin left this claim out of its answer"
                )
                continue
            result = response.claims[claim.uid]
            answers[claim.uid] = PrepareAnswer(
                devices=tuple(
                    PreparedDevice(
                        request_names=tuple(d.request_names),
                        pool=d.pool_name,
                        device=d.device_name,
                        cdi_device_ids=tuple(d.cdi_device_ids),
                        share_id=getattr(d, "share_id", ""),
                    )
                    for d in result.devices
                ),
                error=result.error,
            )
        return answers

    def unprepare(self, claims: Sequence[ClaimKey]) -> dict[str, str]:
        response: dra_v1_pb2.NodeUnprepareResourcesResponse | dra_v1beta1_pb2.NodeUnprepareResourcesResponse
        try:
            if self.version == "v1":
                response = self._v1.NodeUnprepareResources(
                    dra_v1_pb2.NodeUnprepareResourcesRequest(
                        claims=[
                            dra_v1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid) for c in claims
                        ]
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
            else:
                response = self._v1beta1.NodeUnprepareResources(
                    dra_v1beta1_pb2.NodeUnprepareResourcesRequest(
                        claims=[
                            dra_v1beta1_pb2.Claim(namespace=c.namespace, name=c.name, uid=c.uid)
                            for c in claims
                        ]
                    ),
                    timeout=CALL_TIMEOUT_S,
                )
        except grpc.RpcError as e:
            raise StandInError(f"NodeUnprepareResources on {self.endpoint} failed: {e}") from e
        return {
            c.uid: (
                response.claims[c.uid].error
                if c.uid in response.claims
                else "the plugin left this claim out of its answer"
            )
            for c in claims
        }


@dataclass(frozen=True, slots=True)
class _SocketId:
    path: Path
    inode: int
    mtime_ns: int


def _socket_id(path: Path) -> _SocketId | None:
    try:
        st = path.stat()
    except OSError:
        return None
    return _SocketId(path=path, inode=st.st_ino, mtime_ns=st.st_mtime_ns)


class PluginRegistry:
    """The registered plugins of this node. `scan()` is the plugin watcher's one pass; the newest registration
    of a driver wins (two instances run side by side during a rolling update)."""

    def __init__(self, *, registry_dir: Path) -> None:
        self._dir = registry_dir
        self._lock = threading.Lock()
        self._by_socket: dict[Path, tuple[_SocketId, DraConnection | None]] = {}
        self._by_driver: dict[str, DraConnection] = {}
        self.deregistered: set[str] = set()  # drivers that lost their last registration (for slice wiping)

    def scan(self) -> None:
        present = {p: _socket_id(p) for p in self._dir.glob("*.sock")} if self._dir.is_dir() else {}
        with self._lock:
            for path in list(self._by_socket):
                if present.get(path) != self._by_socket[path][0]:
                    self._drop(path)
        for path, sid in present.items():
            if sid is None or path in self._by_socket:
                continue
            try:
                connection = self._register(path)
            except grpc.RpcError as e:
                # Nobody answers yet (a plugin still starting, or a crashed one's leftover): retry next pass.
                log.debug("plugin.not_answering", socket=str(path), error=str(e.code()))
                continue
            with self._lock:
                self._by_socket[path] = (sid, connection)
                if connection is not None:
                    old = self._by_driver.get(connection.driver)
                    self._by_driver[connection.driver] = connection
                    self.deregistered.discard(connection.driver)
                    if old is not None and old is not connection:
                        log.info(
                            "plugin.replaced", driver=connection.driver, endpoint=str(connection.endpoint)
                        )

    def _drop(self, path: Path) -> None:
        _, connection = self._by_socket.pop(path)
        if connection is None:
            return
        log.info("plugin.deregistered", driver=connection.driver, socket=str(path))
        if self._by_driver.get(connection.driver) is connection:
            del self._by_driver[connection.driver]
            others = [
                c for _, c in self._by_socket.values() if c is not None and c.driver == connection.driver
            ]
            if others:
                self._by_driver[connection.driver] = others[-1]
            else:
                self.deregistered.add(connection.driver)
        connection.close()

    def _register(self, path: Path) -> DraConnection | None:
        with grpc.insecure_channel(f"unix://{path}") as channel:
            stub = pluginregistration_pb2_grpc.RegistrationStub(channel)
            info = stub.GetInfo(pluginregistration_pb2.InfoRequest(), timeout=REGISTRATION_TIMEOUT_S)
            error = ""
            version = choose_version(list(info.supported_versions))
            if info.type != PLUGIN_TYPE:
                error = f"plugin type {info.type!r} is not handled by this kubelet"
            elif not info.name:
                error = "the plugin gave no name"
            elif not Path(info.endpoint).is_absolute():
                error = f"endpoint {info.endpoint!r} is not an absolute path"
            elif version is None:
                error = (
                    f"none of the versions {list(info.supported_versions)} is supported; this kubelet "
                    f"speaks {[f'{v}.{PLUGIN_TYPE}' for v in DRA_VERSIONS]}"
                )
            stub.NotifyRegistrationStatus(
                pluginregistration_pb2.RegistrationStatus(plugin_registered=not error, error=error),
                timeout=REGISTRATION_TIMEOUT_S,
            )
        if error or version is None:
            log.error("plugin.rejected", socket=str(path), error=error)
            return None
        log.info("plugin.registered", driver=info.name, endpoint=info.endpoint, version=version)
        return DraConnection(driver=info.name, endpoint=Path(info.endpoint), version=version)

    def connection(self, driver: str) -> DraConnection:
        with self._lock:
            connection = self._by_driver.get(driver)
        if connection is None:
            raise PluginUnavailableError(f"DRA driver {driver} is not registered on this node")
        return connection

    def drivers(self) -> list[str]:
        with self._lock:
            return sorted(self._by_driver)

    def wait_for(self, driver: str, *, timeout_s: float) -> DraConnection:
        deadline = time.monotonic() + timeout_s
        while True:
            self.scan()
            try:
                return self.connection(driver)
            except PluginUnavailableError:
                if time.monotonic() > deadline:
                    raise
            time.sleep(0.1)

    def close(self) -> None:
        with self._lock:
            for path in list(self._by_socket):
                _, connection = self._by_socket.pop(path)
                if connection is not None:
                    connection.close()
            self._by_driver.clear()
