from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.families.base import LibraryLimits
from dra_driver.core.limits_file import GpuLimitLine, LimitsFile, limits_file, parse_limits, render_limits
from dra_driver.values.errors import ConfigError
from dra_driver.values.names import GpuUUID


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
            g.gpu_uuid, g.memory_bytes, g.cores, g.priority, s, f"/var/run/tessera/gpus/{g.gpu_uuid}/view"
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
        ("version 2\n", "first line must be 'version 1'"),
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
