"""The mix of typical requests: read from a CSV in the trace's columns, shapes added up, bad rows named."""

from __future__ import annotations

from importlib import resources

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.fragmentation import Share, Typical, Whole
from scheduler_extender.mix import MAX_KINDS, MIB, mix_csv, parse_mix

Row = tuple[int, int, int, int, int]  # cpu_milli, memory_mib, num_gpu, gpu_milli, count
gpu_part = st.one_of(
    st.tuples(st.just(1), st.integers(1, 999)),
    st.tuples(st.sampled_from([1, 2, 4, 8]), st.just(1000)),
    st.just((0, 0)),
)
rows_st = st.lists(
    st.builds(
        lambda cpu, mem, gpu, count: (cpu, mem, gpu[0], gpu[1], count),
        st.integers(0, 96_000),
        st.integers(0, 1 << 20),
        gpu_part,
        st.integers(0, 50),
    ),
    min_size=1,
    max_size=40,
)


def _csv(rows: list[Row]) -> str:
    return "name,cpu_milli,memory_mib,num_gpu,gpu_milli,count,qos\n" + "".join(
        f"p{k},{c},{m},{n},{g},{w},LS\n" for k, (c, m, n, g, w) in enumerate(rows)
    )


@given(rows_st)
def test_rows_of_one_shape_add_up_and_rows_without_a_gpu_are_left_out(rows: list[Row]) -> None:
    expected: dict[Typical, float] = {}
    for c, m, n, g, w in rows:
        if n and w:
            typical = Typical(Share(g) if g < 1000 else Whole(n), cpu_milli=c, memory=m * MIB)
            expected[typical] = expected.get(typical, 0.0) + w
    if not expected:
        with pytest.raises(ConfigError, match="no row asks for a GPU"):
            parse_mix(_csv(rows))
        return
    mix = parse_mix(_csv(rows))
    assert mix == expected
    assert list(mix.values()) == sorted(mix.values(), reverse=True)  # most frequent first
    assert parse_mix(mix_csv(mix)) == mix  # what mix_csv writes reads back the same


def test_a_trace_pod_list_is_a_mix_each_row_counting_once() -> None:
    text = (
        "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec\n"
        "a,3152,5600,1,810,\nb,3152,5600,1,810,\nc,11300,49152,1,1000,\nd,32000,49152,0,0,\n"
        "e,64000,262144,8,1000,V100M32\n"
    )
    assert parse_mix(text) == {
        Typical(Share(810), cpu_milli=3152, memory=5600 * MIB): 2.0,
        Typical(Whole(1), cpu_milli=11300, memory=49152 * MIB): 1.0,
        Typical(Whole(8), cpu_milli=64000, memory=262144 * MIB): 1.0,
    }


def test_only_the_most_frequent_shapes_are_kept() -> None:
    rows = [(1000 + k, 1024, 1, 500, 1 + k) for k in range(MAX_KINDS + 10)]
    mix = parse_mix(_csv(rows))
    assert len(mix) == MAX_KINDS and min(t.cpu_milli for t in mix) == 1010  # the 10 rarest went


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("cpu_milli,memory_mib,num_gpu\n1,1,1\n", "no column gpu_milli"),
        ("cpu_milli,memory_mib,num_gpu,gpu_milli\n1,1,2,500\n", "line 2: num_gpu 2 with gpu_milli 500"),
        ("cpu_milli,memory_mib,num_gpu,gpu_milli\n1,1,0,500\n", "line 2: gpu_milli 500 without a GPU"),
        ("cpu_milli,memory_mib,num_gpu,gpu_milli\n1,x,1,500\n", "line 2: memory_mib 'x' is not a whole"),
        ("cpu_milli,memory_mib,num_gpu,gpu_milli\n1,1,1,1001\n", "gpu_milli 1001 is out of range"),
        ("cpu_milli,memory_mib,num_gpu,gpu_milli,count\n1,1,1,5,-2\n", "count -2 is out of range"),
        ("cpu_milli,memory_mib,num_gpu,gpu_milli,count\n1,1,1,5,nan\n", "count nan is out of range"),
    ],
)
def test_a_bad_row_is_refused_with_its_line_and_column(text: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        parse_mix(text)


def test_the_shipped_mix_is_the_openb_traces_gpu_pods() -> None:
    text = resources.files("scheduler_extender").joinpath("mixes/openb.csv").read_text(encoding="utf-8")
    mix = parse_mix(text)
    # the trace's 8,152 pods less its 1,088 without a GPU, in 126 shapes; 3,152 CPUs with 81 % of a GPU
    # is its most common
    assert sum(mix.values()) == 8152 - 1088 and len(mix) == 126
    assert next(iter(mix)) == Typical(Share(810), cpu_milli=3152, memory=5600 * MIB)
