"""The MPS daemon record (round trip, corrupt and newer files) and the control tool's answers."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.vocabulary.errors import StorageError, UnsupportedVersionError
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.host_parts.mps.record import (
    GIB,
    MIB,
    MpsRecord,
    decode,
    encode,
    format_pinned_limit,
    parse_pinned_limit,
    parse_thread_percentage,
    shown_pinned_limit,
)

GPU = GpuUUID("GPU-7e55e7a0-1234-4567-89ab-cdef00000001")
RECORD = MpsRecord(gpu_uuid=GPU, pid=4242, tool="t", started_ns=1)


def test_round_trip_and_the_file_says_what_it_is() -> None:
    data = encode(RECORD)
    assert decode(data, source="r") == RECORD
    doc = json.loads(data)
    assert (doc["apiVersion"], doc["kind"]) == ("mps.tessera.dev/v1", "MpsControlDaemon")


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"{not json", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (b'{"apiVersion": "other/v1", "kind": "MpsControlDaemon"}', "expected mps.tessera.dev/v1"),
        (
            b'{"apiVersion": "mps.tessera.dev/v1", "kind": "MpsControlDaemon", "gpuUUID": "g", "pid": "1",'
            b' "tool": "t", "startedNs": 1}',
            "pid is '1', expected a int",
        ),
        (
            b'{"apiVersion": "mps.tessera.dev/v1", "kind": "MpsControlDaemon", "gpuUUID": "../x", "pid": 1,'
            b' "tool": "t", "startedNs": 1}',
            "is not a GPU UUID",
        ),
        (
            b'{"apiVersion": "mps.tessera.dev/v1", "kind": "MpsControlDaemon", "gpuUUID": "g", "pid": 0,'
            b' "tool": "t", "startedNs": 1}',
            "is not a process id",
        ),
    ],
)
def test_a_corrupt_record_names_what_is_wrong(data: bytes, message: str) -> None:
    with pytest.raises(StorageError, match=message):
        decode(data, source="record")


def test_a_newer_record_is_left_alone() -> None:
    with pytest.raises(UnsupportedVersionError, match=r"mps\.tessera\.dev/v2"):
        decode(b'{"apiVersion": "mps.tessera.dev/v2", "kind": "MpsControlDaemon"}', source="r")


@given(st.integers(min_value=1, max_value=1 << 20))
def test_a_pinned_limit_set_in_mib_reads_back_as_the_tool_shows_it(mib: int) -> None:
    text = format_pinned_limit(mib * MIB)
    assert text == f"{mib}M" and parse_pinned_limit(text) == mib * MIB
    shown = shown_pinned_limit(mib * MIB)
    assert shown == (mib * MIB if mib < 1024 else mib * MIB // GIB * GIB)
    assert parse_pinned_limit(f"{shown // GIB}G" if mib >= 1024 else f"{mib}M") == shown


def test_pinned_limits_in_the_tools_forms_only() -> None:
    assert parse_pinned_limit("1G\n") == GIB and parse_pinned_limit("512M") == 512 * MIB
    for bad in ("", "1", "1 G", "1.5G", "1GB", "-1M", "1g", "1T", "G"):
        with pytest.raises(ValueError, match="not a pinned memory limit"):
            parse_pinned_limit(bad)
    with pytest.raises(ValueError, match="below 1 MiB"):
        format_pinned_limit(MIB - 1)


@given(st.integers(min_value=1, max_value=1000))
def test_thread_percentages_as_the_tool_prints_them(tenths: int) -> None:
    assert parse_thread_percentage(f"{tenths / 10:.1f}") == pytest.approx(tenths / 10)


def test_thread_percentages_out_of_range_or_garbled_are_refused() -> None:
    for bad in ("0.0", "100.1", "abc", "", "30%", "1e2"):
        with pytest.raises(ValueError):
            parse_thread_percentage(bad)
