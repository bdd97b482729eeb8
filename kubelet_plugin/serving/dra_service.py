"""The kubelet's DRAPlugin service, v1 and v1beta1: protobuf in, plain values to the preparer, protobuf out.

Guarantees the kubelet relies on: every claim in a request has an entry in the response, errors are per
claim and bounded in size, and nothing the preparer raises takes the daemon down or fails the whole call.
A claim's UID is validated here (`ClaimUID`) before anything can use it as a path.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any, Protocol, TypeVar

import grpc
import structlog

from dra_driver.vocabulary.errors import ClaimError, InvalidNameError
from dra_driver.vocabulary.excerpt import MESSAGE_CHARS, clip, excerpt
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin import metrics
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.proto.gen import dra_v1_pb2 as v1
from kubelet_plugin.proto.gen import dra_v1_pb2_grpc as v1_grpc
from kubelet_plugin.proto.gen import dra_v1beta1_pb2 as v1beta1
from kubelet_plugin.proto.gen import dra_v1beta1_pb2_grpc as v1beta1_grpc
from kubelet_plugin.record.checkpoint_store import Stamp, checkpoint_stamp
from kubelet_plugin.record.results import (
    ClaimPreparer,
    ClaimRef,
    PrepareResult,
    UnprepareResult,
    unique_claims,
)

log = structlog.get_logger(__name__)

R = TypeVar("R", PrepareResult, UnprepareResult)
_ClaimT_co = TypeVar("_ClaimT_co", covariant=True)


class KubeletClaim(Protocol):
    """A claim as the kubelet names it, not yet validated (a protobuf `Claim`, or a `ClaimRef`)."""

    @property
    def namespace(self) -> str: ...

    @property
    def name(self) -> str: ...

    @property
    def uid(self) -> str: ...


class ClaimCalls:
    """What both API versions share: validation, the plugin lock, containment of failures.

    Another instance (rolling update) may have changed the node between two of our calls. When
    `shared_state` (the checkpoint) is not as we left it, `reload` makes the preparer read it again.
    `after` runs after every call that reached the preparer (e.g. ask the publisher to look again).
    """

    def __init__(
        self,
        *,
        preparer: ClaimPreparer,
        lock: PluginLock,
        shared_state: Path | None = None,
        reload: Callable[[], None] | None = None,
        after: Callable[[], None] | None = None,
    ) -> None:
        self._preparer = preparer
        self._lock = lock
        self._shared_state = shared_state
        self._reload = reload
        self._after = after
        self._left: Stamp | None = None  # how we left the shared state; None: unknown

    def prepare(self, claims: Sequence[KubeletClaim]) -> dict[str, PrepareResult]:
        with metrics.KUBELET_CALL_SECONDS.labels("NodePrepareResources").time():
            answers = self._call("prepare", claims, self._preparer.prepare, PrepareResult.failed)
        _count("NodePrepareResources", answers.values())
        return answers

    def unprepare(self, claims: Sequence[KubeletClaim]) -> dict[str, UnprepareResult]:
        with metrics.KUBELET_CALL_SECONDS.labels("NodeUnprepareResources").time():
            answers = self._call("unprepare", claims, self._preparer.unprepare, UnprepareResult.failed)
        _count("NodeUnprepareResources", answers.values())
        return answers

    def _call(
        self,
        verb: str,
        claims: Sequence[KubeletClaim],
        call: Callable[[Sequence[ClaimRef]], Mapping[ClaimUID, R]],
        failed: Callable[[BaseException], R],
    ) -> dict[str, R]:
        answers: dict[str, R] = {}
        checked: list[ClaimRef] = []
        for claim in claims:
            ref = _validated(claim)
            if isinstance(ref, InvalidNameError):
                answers[claim.uid] = failed(ref)
            else:
                checked.append(ref)
        valid = unique_claims(checked)
        if valid:
            try:
                with self._lock.held():
                    self._refresh()
                    self._left = None
                    got = call(valid)
                    self._left = self._stamp()
            except Exception as e:  # one bad call must not crash the daemon; it fails each claim
                log.exception(f"{verb} failed", claims=[c.uid for c in valid])
                got = {c.uid: failed(e) for c in valid}
            if self._after is not None:
                self._after()
            for claim in valid:
                answer = got.get(claim.uid)
                if answer is None:
                    log.error(f"{verb} gave no answer for a claim", claim=claim.uid)
                    missed = f"the node plugin did not {verb} claim {claim.uid}; the kubelet will retry"
                    answer = failed(ClaimError(missed))
                answers[claim.uid] = _bounded(answer)
        return answers

    def _stamp(self) -> Stamp | None:
        return None if self._shared_state is None else checkpoint_stamp(self._shared_state)

    def _refresh(self) -> None:
        if self._reload is not None and (self._left is None or self._stamp() != self._left):
            self._reload()


def _count(call: str, answers: Iterable[PrepareResult | UnprepareResult]) -> None:
    for answer in answers:
        metrics.CLAIMS_HANDLED.labels(call).inc()
        if answer.error is not None:
            metrics.CLAIM_ERRORS.labels(call, metrics.failure_reason(answer.cause)).inc()


def _validated(claim: KubeletClaim) -> ClaimRef | InvalidNameError:
    """The claim with its UID validated, or the problem (naming the field) that fails just this claim."""
    shown = f"claim {excerpt(claim.namespace, bare=True)}/{excerpt(claim.name, bare=True)}"
    missing = [
        f for f, v in (("uid", claim.uid), ("namespace", claim.namespace), ("name", claim.name)) if not v
    ]
    if missing:
        return InvalidNameError(f"{shown} (uid {excerpt(claim.uid)}) lacks {', '.join(missing)}")
    try:
        return ClaimRef(namespace=claim.namespace, name=claim.name, uid=ClaimUID(claim.uid))
    except InvalidNameError as e:
        return InvalidNameError(f"{shown}: field uid: {e}")


def _bounded(answer: R) -> R:
    if answer.error is None or len(answer.error) <= MESSAGE_CHARS:
        return answer
    return replace(answer, error=clip(answer.error))


# What both API versions' response messages have (their generated classes are distinct types).
class _Devices(Protocol):
    def add(self, **fields: Any) -> Any: ...  # v1's Device has share_id, v1beta1's not


class _Prepared(Protocol):
    error: str

    @property
    def devices(self) -> _Devices: ...


class _Unprepared(Protocol):
    error: str


class _Claims(Protocol[_ClaimT_co]):
    def __getitem__(self, uid: str, /) -> _ClaimT_co: ...


def _answer_prepare(
    claims: _Claims[_Prepared], results: Mapping[str, PrepareResult], *, share_ids: bool
) -> None:
    """Fill a NodePrepareResources response's claims; both API versions' messages have these fields (v1beta1
    no share IDs: its kubelet predates consumable capacity)."""
    for uid, result in results.items():
        entry = claims[uid]
        if result.error is not None:
            entry.error = result.error
            continue
        for d in result.devices:
            device = entry.devices.add(
                request_names=d.request_names,
                pool_name=d.pool_name,
                device_name=d.device_name,
                cdi_device_ids=d.cdi_device_ids,
            )
            if share_ids and d.share_id is not None:
                device.share_id = d.share_id


def _answer_unprepare(claims: _Claims[_Unprepared], results: Mapping[str, UnprepareResult]) -> None:
    for uid, result in results.items():
        claims[uid].error = result.error or ""


class DraV1Servicer(v1_grpc.DRAPluginServicer):
    def __init__(self, calls: ClaimCalls) -> None:
        self._calls = calls

    def NodePrepareResources(  # noqa: N802 - gRPC method name
        self, request: v1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodePrepareResourcesResponse:
        response = v1.NodePrepareResourcesResponse()
        _answer_prepare(response.claims, self._calls.prepare(request.claims), share_ids=True)
        return response

    def NodeUnprepareResources(  # noqa: N802 - gRPC method name
        self, request: v1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1.NodeUnprepareResourcesResponse:
        response = v1.NodeUnprepareResourcesResponse()
        _answer_unprepare(response.claims, self._calls.unprepare(request.claims))
        return response


class DraV1beta1Servicer(v1beta1_grpc.DRAPluginServicer):
    """The same answers without share IDs (a v1beta1 kubelet predates consumable capacity)."""

    def __init__(self, calls: ClaimCalls) -> None:
        self._calls = calls

    def NodePrepareResources(  # noqa: N802 - gRPC method name
        self, request: v1beta1.NodePrepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodePrepareResourcesResponse:
        response = v1beta1.NodePrepareResourcesResponse()
        _answer_prepare(response.claims, self._calls.prepare(request.claims), share_ids=False)
        return response

    def NodeUnprepareResources(  # noqa: N802 - gRPC method name
        self, request: v1beta1.NodeUnprepareResourcesRequest, context: grpc.ServicerContext
    ) -> v1beta1.NodeUnprepareResourcesResponse:
        response = v1beta1.NodeUnprepareResourcesResponse()
        _answer_unprepare(response.claims, self._calls.unprepare(request.claims))
        return response
