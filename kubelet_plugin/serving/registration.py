"""The kubelet plugin-registration service: tells the kubelet where the DRA socket is and what it speaks."""

from __future__ import annotations

import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import grpc
import structlog

from dra_driver.vocabulary.names import DRIVER_NAME
from kubelet_plugin.proto.gen import pluginregistration_pb2 as pb
from kubelet_plugin.proto.gen import pluginregistration_pb2_grpc as pb_grpc

PLUGIN_TYPE = "DRAPlugin"
# Newest first; the kubelet picks the highest it knows.
SUPPORTED_VERSIONS = (
    "v1.DRAPlugin",
    "v1beta1.DRAPlugin",
    "v1.DRAResourceHealth",
    "v1alpha1.DRAResourceHealth",
)

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class RegistrationOutcome:
    registered: bool
    error: str


class RegistrationServicer(pb_grpc.RegistrationServicer):
    def __init__(
        self,
        *,
        dra_socket: Path,
        driver_name: str = DRIVER_NAME,
        on_outcome: Callable[[bool], None] | None = None,
    ) -> None:
        if not dra_socket.is_absolute():
            raise ValueError(f"the DRA endpoint must be an absolute path, got {dra_socket}")
        self._info = pb.PluginInfo(
            type=PLUGIN_TYPE,
            name=driver_name,
            endpoint=str(dra_socket),
            supported_versions=list(SUPPORTED_VERSIONS),
        )
        self._outcome: RegistrationOutcome | None = None
        self._changed = threading.Condition()
        self._on_outcome = on_outcome

    def GetInfo(self, request: pb.InfoRequest, context: grpc.ServicerContext) -> pb.PluginInfo:  # noqa: N802
        log.info("kubelet asked for plugin info", endpoint=self._info.endpoint)
        return self._info

    def NotifyRegistrationStatus(  # noqa: N802 - gRPC method name
        self, request: pb.RegistrationStatus, context: grpc.ServicerContext
    ) -> pb.RegistrationStatusResponse:
        outcome = RegistrationOutcome(registered=request.plugin_registered, error=request.error)
        if outcome.registered:
            log.info("registered with the kubelet", driver=self._info.name)
        else:
            log.error("the kubelet rejected the registration", driver=self._info.name, error=outcome.error)
        with self._changed:
            self._outcome = outcome
            self._changed.notify_all()
        if self._on_outcome is not None:
            self._on_outcome(outcome.registered)
        return pb.RegistrationStatusResponse()

    @property
    def outcome(self) -> RegistrationOutcome | None:
        with self._changed:
            return self._outcome

    def wait_for_outcome(self, timeout: float) -> RegistrationOutcome | None:
        with self._changed:
            self._changed.wait_for(lambda: self._outcome is not None, timeout=timeout)
            return self._outcome
