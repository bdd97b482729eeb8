"""The host's memory from /proc/meminfo (dra_driver/backends/meminfo.py): parsed strictly, read bounded."""

from __future__ import annotations

import os
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.backends.meminfo import MEMINFO_MAX_BYTES, host_memory, parse_mem_total

KERNEL = "MemTotal:       32594876 kB\nMemFree:         1234567 kB\nMemAvailable:   20000000 kB\n"


def test_mem_total_in_bytes_from_the_kernels_form() -> None:
    assert parse_mem_total(KERNEL) == 32594876 * 1024
    assert parse_mem_total("MemFree: 1 kB\nMemTotal:\t8 kB\n") == 8192


def test_anything_but_one_well_formed_mem_total_line_says_nothing() -> None:
    for text in (
        "",
        "MemFree: 1 kB\n",
        "MemTotal: 0 kB\n",
        "MemTotal: 12 MB\n",
        "MemTotal: -5 kB\n",
        "MemTotal: 12\n",
        "MemTotal: 1 kB\nMemTotal: 2 kB\n",
        "XMemTotal: 12 kB\n",
        "MemTotal: 1234567890123456 kB\n",
    ):
        assert parse_mem_total(text) is None, text


@given(st.text(max_size=300))
def test_any_text_parses_to_none_or_a_whole_positive_number_of_kib(text: str) -> None:
    got = parse_mem_total(text)
    assert got is None or (got > 0 and got % 1024 == 0)


@given(st.integers(min_value=1, max_value=10**15 - 1), st.text(alphabet="ABCxyz: \n0123456789", max_size=80))
def test_the_line_is_found_among_other_lines(kib: int, other: str) -> None:
    lines = [line for line in other.splitlines() if "MemTotal" not in line]
    assert parse_mem_total("\n".join([*lines, f"MemTotal: {kib} kB", *lines])) == kib * 1024


def test_a_missing_oversized_or_non_regular_file_is_not_known(tmp_path: Path) -> None:
    assert host_memory(tmp_path / "absent") is None
    big = tmp_path / "big"
    big.write_text(KERNEL + "x" * MEMINFO_MAX_BYTES)
    assert host_memory(big) is None
    fifo = tmp_path / "fifo"
    os.mkfifo(fifo)
    assert host_memory(fifo) is None  # never waited on
    (tmp_path / "meminfo").write_text(KERNEL)
    assert host_memory(tmp_path / "meminfo") == 32594876 * 1024


def test_this_machines_meminfo_reads() -> None:
    got = host_memory(Path("/proc/meminfo"))
    assert got is not None and got > 0
