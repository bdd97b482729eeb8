"""The trace's rows: the committed slice reads as the trace has it, every kind of ask is told apart, and bad
rows fail with the line and column named, never with another exception."""

from __future__ import annotations

import contextlib
import csv
import io
from pathlib import Path

import pytest
from hypothesis import given
from hypothesis import strategies as st

from e2e.benches.trace.records import Ask, TraceError, TraceNode, TracePod, parse_nodes, parse_pods

SLICE = Path(__file__).resolve().parents[4] / "e2e" / "benches" / "trace" / "slice"
POD_HEADER = "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"


def test_the_committed_slice_reads_as_the_trace_has_it() -> None:
    nodes = parse_nodes((SLICE / "nodes.csv").read_text())
    assert nodes == [
        TraceNode("openb-node-0143", 8000, 32768, 1, "V100M16"),
        TraceNode("openb-node-0292", 8000, 61440, 1, "P100"),
    ]
    pods = {p.name: p for p in parse_pods((SLICE / "pods.csv").read_text())}
    assert pods["openb-pod-0006"] == TracePod("openb-pod-0006", 4000, 16384, 1, 1000, ("V100M16",))
    assert [(p.ask, p.request_milli) for p in pods.values()] == [
        (Ask.WHOLE, 1000),
        (Ask.SHARE, 810),
        (Ask.SHARE, 650),
        (Ask.CPU, 0),
    ]


def test_whole_gpus_count_a_thousand_each_and_gpu_spec_splits_on_bars() -> None:
    (pod,) = parse_pods(POD_HEADER + "p,1000,2048,4,1000, V100M16 | V100M32 \n")
    assert pod.ask is Ask.WHOLE and pod.request_milli == 4000
    assert pod.gpu_spec == ("V100M16", "V100M32")


@pytest.mark.parametrize(
    ("row", "message"),
    [
        ("p,1000,2048,2,500,", "line 2: 2 GPUs at gpu_milli 500; only one GPU can be shared"),
        ("p,1000,2048,0,500,", "line 2: gpu_milli 500 without a GPU"),
        ("p,1000,2048,1,0,", "line 2: num_gpu 1 with gpu_milli 0"),
        ("p,lots,2048,1,1000,", "line 2: cpu_milli 'lots' is not a whole number"),
        ("p,1000,2048,1,1001,", "line 2: gpu_milli 1001 is out of range; give 0..1000"),
        (",1000,2048,1,1000,", "line 2: name is empty"),
    ],
)
def test_a_bad_pod_row_names_its_line_and_field(row: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        parse_pods(POD_HEADER + row + "\n")


def test_a_missing_column_or_a_second_row_of_one_name_is_refused() -> None:
    with pytest.raises(TraceError, match="no column gpu_milli, gpu_spec"):
        parse_pods("name,cpu_milli,memory_mib,num_gpu\np,1,1,0\n")
    with pytest.raises(TraceError, match="line 3: pod 'p' is listed twice"):
        parse_pods(POD_HEADER + "p,1,1,0,0,\np,1,1,0,0,\n")
    with pytest.raises(TraceError, match="line 2: model is empty for a node with GPUs"):
        parse_nodes("sn,cpu_milli,memory_mib,gpu,model\nn,1000,1000,2,\n")


pods = st.builds(
    lambda name, cpu, mem, gpus, milli, spec: TracePod(
        name, cpu, mem, gpus, 0 if gpus == 0 else (milli if gpus == 1 else 1000), tuple(spec)
    ),
    name=st.from_regex(r"[a-z][a-z0-9-]{0,20}", fullmatch=True),
    cpu=st.integers(0, 10**6),
    mem=st.integers(0, 10**6),
    gpus=st.integers(0, 8),
    milli=st.integers(1, 1000),
    spec=st.lists(st.sampled_from(["T4", "P100", "V100M16", "G2"]), max_size=3, unique=True),
)


@given(st.lists(pods, max_size=20, unique_by=lambda p: p.name))
def test_any_pod_list_written_as_csv_reads_back_the_same(written: list[TracePod]) -> None:
    out = io.StringIO()
    w = csv.writer(out)
    w.writerow(["name", "cpu_milli", "memory_mib", "num_gpu", "gpu_milli", "gpu_spec", "qos"])
    for p in written:
        w.writerow([p.name, p.cpu_milli, p.memory_mib, p.num_gpu, p.gpu_milli, "|".join(p.gpu_spec), "LS"])
    assert parse_pods(out.getvalue()) == written


@given(st.text(max_size=300))
def test_garbage_is_read_or_refused_with_a_trace_error(text: str) -> None:
    for parse in (parse_pods, parse_nodes):
        with contextlib.suppress(TraceError):  # any other exception fails the test
            parse(POD_HEADER + text if parse is parse_pods else "sn,cpu_milli,memory_mib,gpu,model\n" + text)
