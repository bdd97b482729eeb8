"""Encoding a GPU's schedule into its view and reading it back (the C library reads views the daemon wrote in
tests/integration/test_gpu_sharing.py; the entry count is held equal in test_view_contract.py)."""

from __future__ import annotations

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.libtessera.view_layout import (
    FILE_SIZE,
    HEADER,
    MAGIC,
    MAX_SLOTS,
    SCHEDULE,
    SEQ_OFFSET,
    SLOT,
    SLOTS_OFFSET,
    VIEW_SIZE,
    Part,
    blank,
    is_current,
    schedule,
    schedule_head,
    slot_entries,
)


def view_of(parts: tuple[Part, ...], frame_us: int) -> bytes:
    data = bytearray(blank())
    data[SEQ_OFFSET : SEQ_OFFSET + SCHEDULE.size] = schedule_head(4, parts, frame_us=frame_us)
    data[SLOTS_OFFSET:VIEW_SIZE] = slot_entries(parts)
    return bytes(data)


def test_a_blank_view_is_current_with_an_even_sequence_and_no_entries() -> None:
    data = blank()
    assert len(data) == FILE_SIZE and is_current(data)
    assert SCHEDULE.unpack_from(data, SEQ_OFFSET) == (2, 0, 0, 0)
    assert schedule(data) == (0, ())


def test_a_view_of_another_version_is_not_current() -> None:
    old = bytearray(blank())
    HEADER.pack_into(old, 0, MAGIC, 1, VIEW_SIZE)
    assert not is_current(bytes(old))
    assert not is_current(bytes(FILE_SIZE))


parts = st.builds(
    Part,
    slot=st.integers(1, 65535),
    start_us=st.integers(0, 50_000),
    end_us=st.integers(0, 50_000),
    free_pct=st.integers(0, 100),
)


@given(st.lists(parts, max_size=MAX_SLOTS).map(tuple), st.integers(1, 1 << 31))
def test_a_schedule_reads_back_as_written(written: tuple[Part, ...], frame_us: int) -> None:
    assert schedule(view_of(written, frame_us)) == (frame_us, written)


def test_entries_past_the_view_are_left_out_and_unused_ones_are_zero() -> None:
    many = tuple(Part(i, 0, 10) for i in range(1, MAX_SLOTS + 5))
    assert schedule(view_of(many, 50_000)) == (50_000, many[:MAX_SLOTS])
    one = slot_entries((Part(7, 0, 100, 0),))
    assert SLOT.unpack_from(one, 0) == (7, 0, 100, 0) and one[SLOT.size :] == bytes(
        SLOT.size * (MAX_SLOTS - 1)
    )
