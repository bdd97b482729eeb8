from __future__ import annotations

from dataclasses import replace

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.libtessera.limits_file import (
    GpuLimitLine,
    LibraryLimits,
    LimitsFile,
    limits_file,
    parse_limits,
    render_limits,
)
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import GpuUUID


def lim(i: int, memory: int, cores: int, *, time_sliced: bool = True) -> LibraryLimits:
    return LibraryLimits(
        gpu_index=i,
        gpu_uuid=GpuUUID(f"GPU-{i}"),
        memory_bytes=memory,
        cores=cores,
        priority=0,
        time_sliced=time_sliced,
    )


def test_format_one_line_per_gpu_in_gpu_order_with_slots_for_time_sliced_gpus() -> None:
    f = limits_file(
        policy="disable",
        log_level=2,
        limits=(lim(3, 2 << 30, 30), lim(0, 1 << 20, 0), lim(5, 1 << 30, 0, time_sliced=False)),
        slots={GpuUUID("GPU-3"): 2, GpuUUID("GPU-5"): 9},
    )
    assert render_limits(f) == (
        "version 1\n"
        "policy disable\n"
        "loglevel 2\n"
        "gpu GPU-0 memory 1048576 cores 0 priority 0\n"
        "gpu GPU-3 memory 2147483648 cores 30 priority 0 slot 2 view /var/run/tessera/gpus/GPU-3/view\n"
        "gpu GPU-5 memory 1073741824 cores 0 priority 0\n"
    )


lines = st.builds(
    GpuLimitLine,
    gpu_uuid=st.from_regex(r"GPU-[0-9a-f-]{1,36}", fullmatch=True).map(GpuUUID),
    memory_bytes=st.integers(0, 1 << 62),
    cores=st.integers(0, 100),
    priority=st.integers(0, 1),
    ceiling=st.sampled_from([0, 1, 50, 100]),
).flatmap(  # an oversubscribed line holds at most its whole limit on the device
    lambda g: st.builds(replace, st.just(g), resident=st.none() | st.integers(0, g.memory_bytes))
)


@given(
    policy=st.sampled_from(["default", "force", "disable"]),
    log_level=st.integers(0, 4),
    gpus=st.lists(lines, max_size=8),
    slots=st.lists(st.integers(1, 65535), max_size=8),
)
def test_parse_reads_exactly_what_render_writes(
    policy: str, log_level: int, gpus: list[GpuLimitLine], slots: list[int]
) -> None:
    with_slots = tuple(
        GpuLimitLine(
            g.gpu_uuid,
            g.memory_bytes,
            g.cores,
            g.priority,
            s,
            f"/var/run/tessera/gpus/{g.gpu_uuid}/view",
            ceiling=g.ceiling,
            resident=g.resident,
        )
        if s is not None
        else g
        for g, s in zip(gpus, [*slots, *([None] * len(gpus))], strict=False)
    )
    f = LimitsFile(policy=policy, log_level=log_level, gpus=with_slots)
    assert parse_limits(render_limits(f)) == f


@pytest.mark.parametrize(
    ("text", "needle"),
    [
        ("", "first line must be 'version 1'"),
        ("version 4\n", "first line must be 'version 1', 'version 2' or 'version 3'"),
        ("version 2\ngpu G memory 4 cores 30 resident 2\n", "unknown key 'resident'"),
        ("version 3\ngpu G memory 4 cores 30 resident 5\n", "resident is more than memory"),
        ("version 3\ngpu G memory 4 cores 30 resident -1\n", "resident '-1' is not an integer"),
        ("version 1\ngpu G memory 1 cores 30 ceiling 60\n", "unknown key 'ceiling'"),
        ("version 2\ngpu G memory 1 cores 30 ceiling 0\n", "ceiling '0' is not an integer 1-100"),
        ("version 1\npolicy sometimes\n", "unknown line"),
        ("version 1\nloglevel 9\n", "loglevel '9' is not an integer 0-4"),
        ("version 1\ngpu G memory 1 cores 101\n", "cores '101'"),
        ("version 1\ngpu G memory 1 slot 2\n", "slot and view go together"),
        ("version 1\ngpu G memory 1 colour red\n", "unknown key 'colour'"),
        ("version 1\ngpu G memory\n", "a key without a value"),
    ],
)
def test_anything_else_is_refused_naming_the_line(text: str, needle: str) -> None:
    with pytest.raises(ConfigError, match=needle):
        parse_limits(text)


def test_a_ceiling_makes_the_file_version_2_and_a_file_without_one_stays_version_1() -> None:
    burst = LibraryLimits(
        gpu_index=0, gpu_uuid=GpuUUID("GPU-0"), memory_bytes=1 << 30, cores=30, priority=1, ceiling=100
    )
    f = limits_file(policy="default", log_level=1, limits=(burst,), slots={GpuUUID("GPU-0"): 1})
    text = render_limits(f)
    assert text.splitlines()[0] == "version 2"
    assert " cores 30 priority 1 ceiling 100 slot 1 " in text
    assert parse_limits(text).gpus[0].ceiling == 100
    plain = limits_file(policy="default", log_level=1, limits=(lim(0, 1 << 30, 30),), slots={})
    assert render_limits(plain).splitlines()[0] == "version 1"


def test_files_written_before_ceilings_existed_are_still_read() -> None:
    old = "version 1\npolicy force\nloglevel 1\ngpu GPU-1 memory 1024 cores 40 priority 1 slot 3 view /v\n"
    line = parse_limits(old).gpus[0]
    assert (line.cores, line.ceiling, line.slot) == (40, 0, 3)


def test_an_opt_in_makes_the_file_version_3_naming_what_the_device_holds() -> None:
    spilling = LibraryLimits(
        gpu_index=0, gpu_uuid=GpuUUID("GPU-0"), memory_bytes=3 << 30, cores=0, resident_bytes=1 << 30
    )
    plain = lim(1, 1 << 30, 0)
    f = limits_file(policy="default", log_level=1, limits=(spilling, plain), slots={})
    assert render_limits(f).splitlines() == [
        "version 3",
        "policy default",
        "loglevel 1",
        "gpu GPU-0 memory 3221225472 cores 0 priority 1 resident 1073741824",
        "gpu GPU-1 memory 1073741824 cores 0 priority 0",
    ]
    assert parse_limits(render_limits(f)) == f
    # a claim that did not opt in keeps the version it had
    assert render_limits(limits_file(policy="default", log_level=1, limits=(plain,), slots={})).startswith(
        "version 1\n"
    )
