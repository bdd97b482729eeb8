"""The crash tests' fault observer: armed from the environment, firing only at its steps and for its claim."""

from __future__ import annotations

import pytest

from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.record.steps import NO_OBSERVER, Step
from tests.support.faults import DISK_FULL_CDI, FAULT_CLAIM_ENV, FAULT_ENV, Faults


class DiedError(Exception):
    pass


def die() -> None:
    raise DiedError


def test_unarmed_does_nothing() -> None:
    faults = Faults.from_env({})
    assert faults == Faults()
    for step in Step:
        faults.reached(step, ClaimUID("u"))
    assert faults.cdi_write_fault(ClaimUID("u")) is None


def test_env_arms_points_for_one_claim() -> None:
    faults = Faults.from_env({FAULT_ENV: "after-cdi-write, disk-full-cdi", FAULT_CLAIM_ENV: "u1"})
    assert (faults.kill_at, faults.disk_full_cdi) == (frozenset({Step.AFTER_CDI_WRITE}), True)
    faults = Faults(kill_at=faults.kill_at, disk_full_cdi=True, claim=faults.claim, die=die)
    faults.reached(Step.AFTER_CLAIMDIR, ClaimUID("u1"))
    faults.reached(Step.AFTER_CDI_WRITE, ClaimUID("u2"))
    with pytest.raises(DiedError):
        faults.reached(Step.AFTER_CDI_WRITE, ClaimUID("u1"))
    assert faults.cdi_write_fault(ClaimUID("u2")) is None
    fault = faults.cdi_write_fault(ClaimUID("u1"))
    assert fault is not None
    with pytest.raises(OSError, match="No space left"):
        fault()


def test_env_round_trip() -> None:
    for faults in (
        Faults(),
        Faults(kill_at=frozenset({Step.AFTER_MIG_CREATE, Step.UNPREPARE_AFTER_MIG_MODE})),
        Faults(disk_full_cdi=True, claim=ClaimUID("u7")),
    ):
        assert Faults.from_env(faults.env()) == faults


def test_unknown_point_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault point"):
        Faults.from_env({FAULT_ENV: "after-lunch"})


def test_every_step_can_be_armed_by_name() -> None:
    names = ",".join([*(s.value for s in Step), DISK_FULL_CDI])
    assert Faults.from_env({FAULT_ENV: names}).kill_at == frozenset(Step)


def test_the_production_observer_never_interferes() -> None:
    for step in Step:
        NO_OBSERVER.reached(step, ClaimUID("u"))
    assert NO_OBSERVER.cdi_write_fault(ClaimUID("u")) is None
