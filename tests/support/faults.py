"""Fault injection for crash tests: die (SIGKILL) when a claim reaches a named step of prepare/unprepare, or
make its CDI spec write fail with ENOSPC half-way.

An observer of the daemon's steps (`kubelet_plugin.record.steps.StepObserver`). A daemon started through
`python -m tests.support.daemon` reads it from its environment: `TESSERA_FAULT=<name>[,<name>...]` (step
names, plus `disk-full-cdi`) and optionally `TESSERA_FAULT_CLAIM=<uid>` to fire only for one claim.
"""

from __future__ import annotations

import errno
import os
import signal
from collections.abc import Callable, Mapping
from dataclasses import dataclass

import structlog

from dra_driver.io.files import WriteFault
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.record.steps import Step

FAULT_ENV = "TESSERA_FAULT"
FAULT_CLAIM_ENV = "TESSERA_FAULT_CLAIM"
DISK_FULL_CDI = "disk-full-cdi"  # not a crash: the CDI spec write fails with ENOSPC half-way through

log = structlog.get_logger(__name__)


def _die() -> None:
    os.kill(os.getpid(), signal.SIGKILL)


def _disk_full() -> None:
    raise OSError(errno.ENOSPC, os.strerror(errno.ENOSPC))


@dataclass(frozen=True, slots=True)
class Faults:
    kill_at: frozenset[Step] = frozenset()
    disk_full_cdi: bool = False
    claim: ClaimUID | None = None  # None: every claim
    die: Callable[[], None] = _die

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> Faults:
        source = os.environ if env is None else env
        names = [n.strip() for n in source.get(FAULT_ENV, "").split(",") if n.strip()]
        known = {s.value for s in Step} | {DISK_FULL_CDI}
        unknown = [n for n in names if n not in known]
        if unknown:
            raise ValueError(f"{FAULT_ENV}: unknown fault point(s) {unknown}; known: {sorted(known)}")
        claim = source.get(FAULT_CLAIM_ENV) or None
        return cls(
            kill_at=frozenset(Step(n) for n in names if n != DISK_FULL_CDI),
            disk_full_cdi=DISK_FULL_CDI in names,
            claim=ClaimUID(claim) if claim else None,
        )

    def env(self) -> dict[str, str]:
        """The environment that `from_env` reads back as these faults (`die` aside)."""
        names = sorted(s.value for s in self.kill_at) + ([DISK_FULL_CDI] if self.disk_full_cdi else [])
        out = {FAULT_ENV: ",".join(names)}
        if self.claim is not None:
            out[FAULT_CLAIM_ENV] = self.claim
        return out

    def _for(self, claim: ClaimUID) -> bool:
        return self.claim is None or claim == self.claim

    def reached(self, step: Step, claim: ClaimUID) -> None:
        if step in self.kill_at and self._for(claim):
            log.warning("fault injected: killing the process", point=step.value, claim=claim)
            self.die()

    def cdi_write_fault(self, claim: ClaimUID) -> WriteFault | None:
        return _disk_full if self.disk_full_cdi and self._for(claim) else None
