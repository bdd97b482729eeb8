"""Planning claims as the node does (plan_claim over the real `kubernetes` models), for the family tests."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import pytest

from dra_driver.core.allocation import ClaimPlan, RecordsByFamily, plan_claim
from dra_driver.vocabulary.errors import ClaimError, ConfigError, PlacementTakenError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import DRIVER_NAME, Family
from tests.support.claim_models import POOL
from tests.support.inventories import make_gpu, make_inventory

H100 = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM"))


def plan(
    c: Any,
    inventory: Inventory = H100,
    *,
    own: Mapping[Family, Sequence[object]] | None = None,
    others: Mapping[Family, Sequence[object]] | None = None,
) -> ClaimPlan:
    recorded = RecordsByFamily(
        claim={f: tuple(r) for f, r in (own or {}).items()},
        others={f: tuple(r) for f, r in (others or {}).items()},
    )
    return plan_claim(c, driver=DRIVER_NAME, pool=POOL, inventory=inventory, recorded=recorded)


def error_of(c: Any, inventory: Inventory = H100, **kw: Any) -> str:
    with pytest.raises((ClaimError, ConfigError, PlacementTakenError)) as info:
        plan(c, inventory, **kw)
    return str(info.value)
