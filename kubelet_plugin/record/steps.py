"""The named steps of prepare and unprepare, and the observer told when a claim passes one.

A production daemon runs with `NO_OBSERVER`. The steps are the points where a crash leaves the node in a
distinct state, so a harness that wants to prove recovery (tests/support/faults.py) installs an observer that
stops the process at one of them; the observer may also make the CDI spec write fail part-way.
"""

from __future__ import annotations

from enum import StrEnum
from typing import Protocol

from dra_driver.io.files import WriteFault
from dra_driver.vocabulary.names import ClaimUID


class Step(StrEnum):
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


class StepObserver(Protocol):
    def reached(self, step: Step, claim: ClaimUID) -> None:
        """`claim` has just completed `step`; what it did is on disk (or on the GPU)."""
        ...

    def cdi_write_fault(self, claim: ClaimUID) -> WriteFault | None:
        """Run part-way through writing `claim`'s CDI spec (it may raise OSError), or None."""
        ...


class _Unobserved:
    def reached(self, step: Step, claim: ClaimUID) -> None:
        return None

    def cdi_write_fault(self, claim: ClaimUID) -> WriteFault | None:
        return None


NO_OBSERVER: StepObserver = _Unobserved()
