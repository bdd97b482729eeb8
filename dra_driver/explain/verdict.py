"""What `tessera explain` concludes: per request, the devices that fit and why each other one does not."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum
from typing import Any


class ReasonKind(StrEnum):
    CLASS_SELECTOR = "class-selector"  # a DeviceClass selector is false
    CLAIM_SELECTOR = "claim-selector"  # a selector of the request is false
    SELECTOR_ERROR = "selector-error"  # a selector failed at run time: the scheduler reports it as an error
    SELECTOR_UNSUPPORTED = "selector-unsupported"  # valid CEL that explain cannot evaluate (optional types)
    TAINTED = "tainted"  # a NoSchedule/NoExecute device taint the request does not tolerate
    CAPACITY_POLICY = "capacity-policy"  # the capacity request is outside the device's requestPolicy or size
    ALREADY_ALLOCATED = "already-allocated"  # an exclusive device is in use
    CAPACITY_EXHAUSTED = "capacity-exhausted"  # a shared device has too little of a capacity left
    SHARES_EXHAUSTED = "shares-exhausted"  # a shared device has no share left
    COUNTER_EXHAUSTED = "counter-exhausted"  # a shared counter (MIG memory slice, compute) is used up
    CONSTRAINT = "constraint"  # matchAttribute / distinctAttribute against devices already picked


@dataclass(frozen=True, slots=True)
class Reason:
    kind: ReasonKind
    message: str


@dataclass(frozen=True, slots=True)
class DeviceVerdict:
    device: str  # pool/device
    reason: Reason | None  # None: it fits


@dataclass(frozen=True, slots=True)
class RequestVerdict:
    request: str  # `gpu` or `gpu/small` for a firstAvailable subrequest
    satisfied: bool
    allocated: tuple[str, ...]
    devices: tuple[DeviceVerdict, ...]
    problem: str = ""
    reached: bool = True  # false when an earlier request already failed


@dataclass(frozen=True, slots=True)
class ClaimVerdict:
    claim: str
    node: str
    satisfiable: bool
    requests: tuple[RequestVerdict, ...]
    errors: tuple[str, ...] = ()  # what the API server or the scheduler reports as an error
    undecided: tuple[str, ...] = ()  # why explain cannot tell: valid selectors it cannot evaluate

    @property
    def decided(self) -> bool:
        return not self.undecided

    @property
    def outcome(self) -> str:
        if self.undecided:
            return "cannot-decide"
        return "fits" if self.satisfiable else "does-not-fit"

    def to_dict(self) -> dict[str, Any]:
        return {
            "claim": self.claim,
            "node": self.node,
            "satisfiable": self.satisfiable,
            "verdict": self.outcome,
            "errors": list(self.errors),
            "undecided": list(self.undecided),
            "requests": [
                {
                    "request": r.request,
                    "satisfied": r.satisfied,
                    "reached": r.reached,
                    "allocated": list(r.allocated),
                    "problem": r.problem,
                    "devices": [
                        {"device": d.device, "fits": d.reason is None}
                        | ({"reason": d.reason.kind.value, "message": d.reason.message} if d.reason else {})
                        for d in r.devices
                    ],
                }
                for r in self.requests
            ],
        }


def render(verdict: ClaimVerdict, *, verbose: bool = False) -> str:
    """Plain text for a terminal; devices the class itself excludes are folded unless `verbose`."""
    head = "can be allocated" if verdict.satisfiable else "cannot be allocated"
    if not verdict.decided:
        head = "cannot decide"
    lines = [f"claim {verdict.claim} on node {verdict.node}: {head}"]
    lines.extend(f"  error: {e}" for e in verdict.errors)
    lines.extend(f"  cannot decide: {u}" for u in verdict.undecided)
    for r in verdict.requests:
        state = "ok" if r.satisfied else ("not reached" if not r.reached else "unsatisfied")
        if not r.satisfied and not verdict.decided:
            state = "cannot decide"
        alloc = f" → {', '.join(r.allocated)}" if r.allocated else ""
        lines.append(f"  request {r.request}: {state}{alloc}")
        if r.problem:
            lines.append(f"    {r.problem}")
        folded = 0
        for d in r.devices:
            if d.reason is None:
                lines.append(f"    fits      {d.device}")
            elif d.reason.kind is ReasonKind.CLASS_SELECTOR and not verbose:
                folded += 1
            else:
                lines.append(f"    no        {d.device}: [{d.reason.kind.value}] {d.reason.message}")
        if folded:
            lines.append(f"    ({folded} devices of other classes not shown; --verbose lists them)")
    return "\n".join(lines)
