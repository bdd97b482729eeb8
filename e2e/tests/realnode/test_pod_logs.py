"""The CRI log reader: partial lines joined, other streams ignored, the latest run's report found."""

from __future__ import annotations

import json
from pathlib import Path

from hypothesis import given
from hypothesis import strategies as st

from e2e.realnode.pod_logs import PROBE_PREFIX, parse_cri_log, probe_report

TS = "2026-11-22T21:25:00.000000000Z"


def cri(stream: str, tag: str, text: str) -> str:
    return f"{TS} {stream} {tag} {text}"


def test_partial_lines_are_joined_and_stderr_is_left_out() -> None:
    text = "\n".join(
        [
            cri("stdout", "P", "first half "),
            cri("stderr", "F", "noise"),
            cri("stdout", "F", "second half"),
            cri("stdout", "F", ""),
        ]
    )
    assert parse_cri_log(text) == ["first half second half", ""]
    assert parse_cri_log(text, stream="stderr") == ["noise"]


@given(st.lists(st.text(alphabet=st.characters(blacklist_characters="\n\r"), min_size=1), min_size=1))
def test_any_split_into_parts_reassembles(parts: list[str]) -> None:
    lines = [cri("stdout", "P", p) for p in parts[:-1]] + [cri("stdout", "F", parts[-1])]
    assert parse_cri_log("\n".join(lines)) == ["".join(parts)]


def test_the_latest_run_reports(tmp_path: Path) -> None:
    assert probe_report(tmp_path) is None
    (tmp_path / "0.log").write_text(cri("stdout", "F", PROBE_PREFIX + json.dumps({"run": 0})) + "\n")
    (tmp_path / "1.log").write_text(cri("stdout", "F", "starting") + "\n")
    assert probe_report(tmp_path) is None  # run 1 has not reported yet
    report = PROBE_PREFIX + json.dumps({"run": 1, "env": {"A": "b c"}})
    half = len(report) // 2
    with (tmp_path / "1.log").open("a") as f:
        f.write(cri("stdout", "P", report[:half]) + "\n" + cri("stdout", "F", report[half:]) + "\n")
    assert probe_report(tmp_path) == {"run": 1, "env": {"A": "b c"}}
