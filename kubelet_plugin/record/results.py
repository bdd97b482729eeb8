"""What the gRPC layer asks of the prepare logic, and what it gets back: plain values, no protobuf."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.excerpt import clip
from dra_driver.vocabulary.names import ClaimUID


@dataclass(frozen=True, slots=True)
class ClaimRef:
    """A claim as the kubelet names it."""

    namespace: str
    name: str
    uid: ClaimUID


def unique_claims(claims: Sequence[ClaimRef]) -> list[ClaimRef]:
    """Each claim once, in the order first given: the kubelet may name a claim twice; it gets one answer."""
    first: dict[ClaimUID, ClaimRef] = {}
    for c in claims:
        first.setdefault(c.uid, c)
    return list(first.values())


def describe_failure(e: BaseException) -> str:
    """What a claim's caller is told when its call failed: our own errors as they are (bounded), anything
    else as an internal error that points at the log."""
    if isinstance(e, TesseraError):
        return clip(str(e))
    return clip(f"internal error in the node plugin ({type(e).__name__}: {e}); see the plugin log")


@dataclass(frozen=True, slots=True)
class PreparedDevice:
    """One device of the answer to the kubelet; the checkpoint keeps it to replay on a repeated prepare."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None


@dataclass(frozen=True, slots=True)
class PrepareResult:
    devices: tuple[PreparedDevice, ...] = ()
    error: str | None = None  # set: the claim failed, devices is empty
    # The failure's type, whose `reason` the metrics count it under; None with an error: only a message.
    cause: type[BaseException] | None = None

    @classmethod
    def failed(cls, e: BaseException) -> PrepareResult:
        return cls(error=describe_failure(e), cause=type(e))


@dataclass(frozen=True, slots=True)
class UnprepareResult:
    error: str | None = None
    cause: type[BaseException] | None = None  # as PrepareResult's

    @classmethod
    def failed(cls, e: BaseException) -> UnprepareResult:
        return cls(error=describe_failure(e), cause=type(e))


class ClaimPreparer(Protocol):
    """Every claim asked about gets an answer; one claim's failure never affects another's."""

    def prepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, PrepareResult]: ...

    def unprepare(self, claims: Sequence[ClaimRef]) -> dict[ClaimUID, UnprepareResult]: ...
