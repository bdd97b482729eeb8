from __future__ import annotations

import itertools

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.sm_schedule import DEFAULT_FRAME_US, SharingClaim, free_slot, partition, schedule
from dra_driver.libtessera.view_layout import MAX_SLOTS, Part


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


def spans(parts: tuple[Part, ...]) -> list[tuple[int, int, int, int]]:
    return [(p.slot, p.start_us, p.end_us, p.free_pct) for p in parts]


def test_without_knowing_who_has_work_the_layout_is_the_strict_partition() -> None:
    claims = [SharingClaim(1, 30, ceiling=100), SharingClaim(2, 70)]
    assert schedule(claims, frame_us=50_000) == schedule(claims, frame_us=50_000, active=None)
    assert spans(schedule(claims, frame_us=50_000)) == [(1, 0, 15_000, 0), (2, 15_000, 50_000, 0)]


def test_the_only_claim_with_work_and_the_idle_ones_start_at_once_up_to_their_ceilings() -> None:
    claims = [SharingClaim(1, 30, ceiling=100), SharingClaim(2, 70), SharingClaim(3, 0)]
    assert spans(schedule(claims, frame_us=50_000, active={1})) == [
        (1, 0, 0, 100),
        (2, 0, 0, 70),
        (3, 0, 0, 100),
    ]
    assert spans(schedule([SharingClaim(1, 30, ceiling=50)], active=set())) == [(1, 0, 0, 50)]


def test_claims_with_work_share_the_idle_claims_time_in_proportion_up_to_their_ceilings() -> None:
    claims = [
        SharingClaim(1, 20, ceiling=100),
        SharingClaim(2, 20, ceiling=30),
        SharingClaim(3, 40),
        SharingClaim(4, 20, ceiling=100),
    ]
    # slot 3 idle: its 40 goes to 1, 2 and 4 by their shares (13.3 each), 2 stops at 30 and gives the rest
    parts = schedule(claims, frame_us=60_000, active={1, 2, 4})
    assert spans(parts) == [
        (1, 0, 21_000, 0),
        (2, 21_000, 39_000, 0),
        (4, 39_000, 60_000, 0),
        (3, 0, 0, 40),
    ]


def test_both_busy_keep_exactly_their_shares_whatever_their_ceilings() -> None:
    claims = [SharingClaim(1, 30, ceiling=100), SharingClaim(2, 70)]
    assert spans(schedule(claims, frame_us=50_000, active={1, 2})) == [
        (1, 0, 15_000, 0),
        (2, 15_000, 50_000, 0),
    ]


def test_ceilings_leave_time_to_busy_claims_without_a_share_or_else_idle() -> None:
    claims = [SharingClaim(1, 20, ceiling=40), SharingClaim(2, 30), SharingClaim(3, 20, ceiling=30)]
    # 2 idle: 1 and 3 grow by 20 : 20 to 40 and 30 at most; 30 % of the GPU stays idle
    assert spans(schedule(claims, frame_us=10_000, active={1, 3})) == [
        (1, 0, 4_000, 0),
        (3, 4_000, 7_000, 0),
        (2, 0, 0, 30),
    ]
    with_free = [*claims, SharingClaim(4, 0)]
    # a busy claim without a share keeps the unreserved 30 % and gets what the ceilings leave
    assert spans(schedule(with_free, frame_us=10_000, active={1, 3, 4})) == [
        (1, 0, 4_000, 0),
        (3, 4_000, 7_000, 0),
        (4, 7_000, 10_000, 0),
        (2, 0, 0, 30),
    ]


@given(st.lists(st.tuples(st.integers(0, 100), st.integers(0, 100)), min_size=1, max_size=10), st.data())
def test_busy_claims_get_at_least_their_share_and_at_most_their_ceiling_never_overlapping(
    claims: list[tuple[int, int]], data: st.DataObject
) -> None:
    kept: list[SharingClaim] = []
    total = 0
    for slot, (cores, ceiling) in enumerate(claims, start=1):
        if cores and total + cores > 100:
            continue  # the scheduler keeps a GPU's shares at 100 or less
        total += cores
        kept.append(SharingClaim(slot, cores, ceiling=ceiling))
    active = data.draw(st.sets(st.sampled_from([c.slot for c in kept])))
    frame = 100_000
    parts = schedule(kept, frame_us=frame, active=active)
    shared = sorted(
        (p for p in parts if not p.free and next(c for c in kept if c.slot == p.slot).cores > 0),
        key=lambda p: p.start_us,
    )
    for a, b in itertools.pairwise(shared):
        assert a.end_us <= b.start_us
    busy_shared = [c for c in kept if c.slot in active and c.cores > 0]
    for c in kept:
        mine = [p for p in parts if p.slot == c.slot]
        if len(active) >= 2 and c in busy_shared:
            (p,) = mine
            assert frame * c.cores // 100 - 1 <= p.end_us - p.start_us <= frame * c.top // 100
        elif c.slot not in active or len(active) <= 1:
            assert mine == [Part(c.slot, 0, 0, c.top)]
    if len(active) < 2 or any(c.cores == 0 and c.slot in active for c in kept):
        return
    length = {p.slot: p.end_us - p.start_us for p in shared}
    if any(length[c.slot] < frame * c.top // 100 - len(kept) for c in busy_shared):
        # work-conserving: while a busy claim could take more, no time is left idle
        assert sum(length.values()) >= frame - len(kept)


def test_high_priority_claims_stay_out_of_the_work_conserving_layout() -> None:
    claims = [SharingClaim(1, 30, high_priority=True), SharingClaim(2, 20, ceiling=100), SharingClaim(3, 50)]
    # the high claim's work holds the others back through the relay, not through the frame: the frame is the
    # normal claims', and what their shares leave goes to the one with a ceiling
    assert spans(schedule(claims, frame_us=10_000, active={1, 2, 3})) == [
        (2, 0, 5_000, 0),
        (3, 5_000, 10_000, 0),
    ]
    assert spans(schedule(claims, frame_us=10_000, active={1, 2})) == [(2, 0, 0, 100), (3, 0, 0, 50)]


@given(
    st.lists(st.tuples(st.integers(0, 1), st.booleans()), max_size=MAX_SLOTS),
    st.sets(st.integers(1, MAX_SLOTS)) | st.none(),
)
def test_up_to_max_slots_claims_never_need_more_entries_than_the_view_holds(
    claims: list[tuple[int, bool]], active: set[int] | None
) -> None:
    """Every layout gives a claim at most one entry (a part, or a free entry while it bursts or idles), so the
    MAX_SLOTS claims a GPU can take (vgpuShares' bound) always fit the view, and with shares that leave time
    over (1 % each at most here) every normal claim has its entry: nothing is cut off."""
    sharing = [
        SharingClaim(slot, cores, high_priority=high, ceiling=cores + 50)
        for slot, (cores, high) in enumerate(claims, start=1)
    ]
    normal = {c.slot for c in sharing if not c.high_priority}
    for parts in (partition(sharing), schedule(sharing, active=active)):
        assert len(parts) <= len(sharing) <= MAX_SLOTS
        assert sorted(p.slot for p in parts) == sorted(normal)
