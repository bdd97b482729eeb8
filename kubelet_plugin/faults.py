"""Test-only fault injection: die (SIGKILL) at a named step of prepare/unprepare, or fill the disk.

Armed through the environment (`TESSERA_FAULT=<point>[,<point>...]`, optionally `TESSERA_FAULT_CLAIM=<uid>`
to fire only for one claim), so crash tests can drive the real daemon. Unarmed, every check is a set lookup.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass
from enum import StrEnum

import structlog

from dra_driver.names import FAULT_CLAIM_ENV, FAULT_ENV, ClaimUID

log = structlog.get_logger(__name__)


class FaultPoint(StrEnum):
    # prepare, in order
    AFTER_CHECKPOINT_STARTED = "after-checkpoint-started"
    AFTER_MIG_MODE = "after-mig-mode"
    AFTER_MIG_CREATE = "after-mig-create"
    AFTER_CLAIMDIR = "after-claimdir"
    AFTER_CDI_WRITE = "after-cdi-write"
    AFTER_CHECKPOINT_COMPLETED = "after-checkpoint-completed"
    # unprepare, in order
    UNPREPARE_AFTER_CHECKPOINT_STARTED = "unprepare-after-checkpoint-started"
    UNPREPARE_AFTER_CDI_REMOVE = "unprepare-after-cdi-remove"
    UNPREPARE_AFTER_MIG_DESTROY = "unprepare-after-mig-destroy"
    UNPREPARE_AFTER_MIG_MODE = "unprepare-after-mig-mode"
    UNPREPARE_AFTER_CLAIMDIR_REMOVE = "unprepare-after-claimdir-remove"
    UNPREPARE_AFTER_CHECKPOINT_REMOVED = "unprepare-after-checkpoint-removed"
    # not a crash: the CDI spec write fails with ENOSPC half-way through
    DISK_FULL_CDI = "disk-full-cdi"


KILL_POINTS = tuple(p for p in FaultPoint if p is not FaultPoint.DISK_FULL_CDI)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


@dataclass(frozen=True, slots=True)
class Faults:
    points: frozenset[FaultPoint] = frozenset()
    claim: ClaimUID | None = None  # None: every claim
    die: Callable[[], None] = _die

    @classmethod
    def none(cls) -> Faults:
        return cls()

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        source = os.environ if env is None else env
        raw = [p.strip() for p in source.get(FAULT_ENV, "").split(",") if p.strip()]
        known = {p.value for p in FaultPoint}
        unknown = [p for p in raw if p not in known]
        if unknown:
            raise ValueError(f"{FAULT_ENV}: unknown fault point(s) {unknown}; known: {sorted(known)}")
        claim = source.get(FAULT_CLAIM_ENV) or None
        return cls(points=frozenset(FaultPoint(p) for p in raw), claim=ClaimUID(claim) if claim else None)

    def _armed(self, point: FaultPoint, uid: ClaimUID | None) -> bool:
        return point in self.points and (self.claim is None or uid is None or uid == self.claim)

    def hit(self, point: FaultPoint, uid: ClaimUID | None = None) -> None:
        """Die here if this point is armed (for this claim)."""
        if self._armed(point, uid):
            log.warning("fault injected: killing the process", point=point.value, claim=uid)
            self.die()

    def cdi_write_fault(self, uid: ClaimUID) -> Callable[[], None] | None:
        if not self._armed(FaultPoint.DISK_FULL_CDI, uid):
            return None

        def disk_full() -> None:
            raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))

        return disk_full
