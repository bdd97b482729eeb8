"""What the gRPC layer asks of the prepare logic, and what it gets back: plain values, no protobuf."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dra_driver.names import ClaimUID


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: ClaimUID


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str | None = None  # set: the claim failed, devices is empty


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    error: str | None = None


class ClaimPreparer(Protocol):
    """Every claim asked about gets an answer; one claim's failure never affects another's."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]: ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]: ...
