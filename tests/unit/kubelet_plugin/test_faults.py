from __future__ import annotations

import pytest

from dra_driver.names import FAULT_CLAIM_ENV, FAULT_ENV, ClaimUID
from kubelet_plugin.faults import KILL_POINTS, FaultPoint, Faults


class DiedError(Exception):
    pass


def die() -> None:
    raise DiedError


def test_unarmed_does_nothing() -> None:
    faults = Faults.from_env({})
    for point in FaultPoint:
        faults.hit(point, ClaimUID("u"))
    assert faults.cdi_write_fault(ClaimUID("u")) is None


def test_env_arms_points_for_one_claim() -> None:
    faults = Faults.from_env({FAULT_ENV: "after-cdi-write, disk-full-cdi", FAULT_CLAIM_ENV: "u1"})
    faults = Faults(points=faults.points, claim=faults.claim, die=die)
    faults.hit(FaultPoint.AFTER_CLAIMDIR, ClaimUID("u1"))
    faults.hit(FaultPoint.AFTER_CDI_WRITE, ClaimUID("u2"))
    with pytest.raises(DiedError):
        faults.hit(FaultPoint.AFTER_CDI_WRITE, ClaimUID("u1"))
    assert faults.cdi_write_fault(ClaimUID("u2")) is None
    fault = faults.cdi_write_fault(ClaimUID("u1"))
    assert fault is not None
    with pytest.raises(OSError, match="No space left"):
        fault()


def test_unknown_point_is_refused() -> None:
    with pytest.raises(ValueError, match="unknown fault point"):
        Faults.from_env({FAULT_ENV: "after-lunch"})


def test_kill_points_exclude_disk_full() -> None:
    assert FaultPoint.DISK_FULL_CDI not in KILL_POINTS
    assert len(KILL_POINTS) == len(FaultPoint) - 1
