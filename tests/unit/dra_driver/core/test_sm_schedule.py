from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.sm_schedule import DEFAULT_FRAME_US, SharingClaim, free_slot, schedule


def test_shares_back_to_back_in_slot_order() -> None:
    parts = schedule([SharingClaim(2, 70), SharingClaim(1, 30)], frame_us=50_000)
    assert [(p.slot, p.start_us, p.end_us) for p in parts] == [(1, 0, 15_000), (2, 15_000, 50_000)]


def test_claims_without_a_share_share_what_is_left() -> None:
    parts = schedule([SharingClaim(1, 20), SharingClaim(2, 0), SharingClaim(3, 0)], frame_us=50_000)
    assert [(p.slot, p.start_us, p.end_us) for p in parts] == [
        (1, 0, 10_000),
        (2, 10_000, 50_000),
        (3, 10_000, 50_000),
    ]


def test_nothing_left_for_unreserved_claims_when_shares_fill_the_frame() -> None:
    parts = schedule([SharingClaim(1, 100), SharingClaim(2, 0)])
    assert [(p.slot, p.end_us) for p in parts] == [(1, DEFAULT_FRAME_US)]


def test_high_priority_claims_have_no_part() -> None:
    parts = schedule([SharingClaim(1, 30, high_priority=True), SharingClaim(2, 50)], frame_us=1000)
    assert [(p.slot, p.start_us, p.end_us) for p in parts] == [(2, 0, 500)]


def test_frame_must_be_positive() -> None:
    with pytest.raises(ValueError, match="frame_us must be positive"):
        schedule([], frame_us=0)


def test_free_slot_is_the_lowest_unused() -> None:
    assert free_slot(set()) == 1
    assert free_slot({1, 2, 4}) == 3


@given(st.lists(st.tuples(st.integers(0, 100), st.booleans()), max_size=12), st.integers(1000, 200_000))
def test_parts_never_overlap_and_match_shares(claims: list[tuple[int, bool]], frame: int) -> None:
    # the scheduler keeps a GPU's shares at 100 or less
    total = 0
    kept = []
    for slot, (cores, high) in enumerate(claims, start=1):
        if cores and total + cores > 100:
            continue
        total += cores
        kept.append(SharingClaim(slot, cores, high))
    parts = schedule(kept, frame_us=frame)
    by_slot = {c.slot: c for c in kept}
    reserved = sorted((p for p in parts if by_slot[p.slot].cores), key=lambda p: p.start_us)
    for a, b in itertools.pairwise(reserved):
        assert a.end_us <= b.start_us
    for p in parts:
        c = by_slot[p.slot]
        assert not c.high_priority
        assert 0 <= p.start_us < p.end_us <= frame
        if c.cores:
            assert p.end_us - p.start_us == frame * c.cores // 100
