"""Decoding the accounting region from bytes (the C library's own regions: tests/integration/
test_region_contract.py)."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.libtessera.region_layout import (
    GPU,
    GPUS_OFFSET,
    HEADER,
    MAGIC,
    MAX_GPUS,
    MAX_PROCS,
    PROC,
    PROCS_OFFSET,
    SIZE,
    VERSION,
    RegionProcess,
    RegionUnreadableError,
    live_processes,
    process_slots,
    region,
)

MiB = 1 << 20


def head(*, magic: int = MAGIC, version: int = VERSION, total: int = SIZE, proc_high: int = 0) -> bytearray:
    data = bytearray(PROCS_OFFSET)
    HEADER.pack_into(data, 0, magic, version, GPUS_OFFSET, total, MAX_GPUS, MAX_PROCS, proc_high, 0)
    return data


def gpu_entry(data: bytearray, i: int, uuid: bytes, *, limit: int, cores: int, launches: int) -> None:
    fields = [uuid, 0, limit, 0, 0, cores, 1, launches] + [0] * 10
    GPU.pack_into(data, GPUS_OFFSET + i * GPU.size, *fields)


def proc_slot(pid: int, state: int, used: list[int]) -> bytes:
    return PROC.pack(pid, state, 0, *(used + [0] * (MAX_GPUS - len(used))))


def test_the_header_says_how_many_process_slots_to_read_bounded_by_the_layout() -> None:
    assert process_slots(bytes(head(proc_high=3))) == 3
    assert process_slots(bytes(head(proc_high=1 << 31))) == MAX_PROCS  # a forged count reads no further


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (head(magic=0), "not a version 2 region"),
        (head(version=1), "not a version 2 region"),
        (head(total=SIZE - 1), "layout mismatch"),
    ],
)
def test_another_magic_version_or_layout_is_unreadable(data: bytearray, needle: str) -> None:
    with pytest.raises(RegionUnreadableError, match=needle):
        process_slots(bytes(data))


def test_only_attached_processes_whose_lock_is_held_count_and_their_bytes_are_capped() -> None:
    body = proc_slot(10, 1, [100 * MiB]) + proc_slot(11, 0, [MiB]) + proc_slot(12, 1, [1 << 60])
    body += proc_slot(13, 1, [MiB])
    live = live_processes(body, alive=lambda slot: slot != 3)  # slot 3's process died without detaching
    assert live == (
        RegionProcess(10, (100 * MiB,) + (0,) * (MAX_GPUS - 1), slot=0),
        RegionProcess(12, (1 << 56,) + (0,) * (MAX_GPUS - 1), slot=2),
    )


def test_gpu_entries_carry_what_the_live_processes_hold_on_them() -> None:
    data = head()
    gpu_entry(data, 0, b"GPU-a", limit=1 << 30, cores=30, launches=7)
    gpu_entry(data, 2, b"GPU-b", limit=2 << 30, cores=0, launches=1)
    procs = (RegionProcess(1, (MiB, 0, 5 * MiB) + (0,) * 13), RegionProcess(2, (2 * MiB,) + (0,) * 15))
    r = region(bytes(data), procs)
    a, b = r.gpu("gpu-A"), r.gpu("GPU-b")  # found whatever the case of the UUID
    assert a is not None and b is not None and r.gpu("GPU-c") is None
    assert (a.used_bytes, a.limit_bytes, a.cores, a.launches, a.entry) == (3 * MiB, 1 << 30, 30, 7, 0)
    assert (b.used_bytes, b.entry) == (5 * MiB, 2)
    assert r.processes == procs


@given(st.binary(min_size=PROCS_OFFSET, max_size=PROCS_OFFSET))
def test_any_bytes_decode_or_are_unreadable_never_anything_else(data: bytes) -> None:
    try:
        high = process_slots(data)
    except RegionUnreadableError:
        return
    assert 0 <= high <= MAX_PROCS
    region(data, ())


@given(st.binary(max_size=PROC.size * 4).map(lambda b: b[: len(b) - len(b) % PROC.size]))
def test_any_process_slots_decode_with_bytes_within_the_cap(body: bytes) -> None:
    for p in live_processes(body, alive=lambda _: True):
        assert all(0 <= u <= 1 << 56 for u in p.used_bytes)
