"""A claim's limits file on the node: what prepare writes for a plan, and what the node reads back."""

from __future__ import annotations

import os
from dataclasses import replace
from pathlib import Path

import pytest

from dra_driver.core.families import vgpu
from dra_driver.core.families.vgpu import GpuShare
from dra_driver.libtessera.limits_file import MAX_LIMITS_BYTES, GpuLimitLine, LimitsFile, render_limits
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from kubelet_plugin.library_files.limits import claim_limits, limits_bytes, read_limits
from tests.support.claim_models import claim, result, vgpu_result
from tests.support.family_plans import H100, plan

GiB = 1 << 30
G0, G1 = H100.gpus[0].uuid, H100.gpus[1].uuid


def test_a_plan_gives_a_line_per_library_gpu_with_the_slot_its_records_hold() -> None:
    p = plan(
        claim(
            vgpu_result(0, memory="2Gi", cores="30", request="v"),
            result("gpu-1-mps", request="m", share_id="s", consumed={"memory": "4Gi", "cores": "20"}),
        )
    )
    f = claim_limits(p, {vgpu.NAME: (GpuShare(G0, slot=3, cores=30),)})
    assert f is not None and (f.policy, f.log_level) == ("default", 1)
    assert f.gpus == (
        GpuLimitLine(G0, 2 * GiB, 30, 1, slot=3, view=f"/var/run/tessera/gpus/{G0}/view"),
        GpuLimitLine(G1, 4 * GiB, 0, 1),  # MPS: memory only, no place in a schedule
    )


def test_the_file_says_the_limits_the_claim_was_planned_with() -> None:
    p = plan(claim(vgpu_result(0, memory="2Gi", cores="30")))
    (d,) = p.devices
    assert d.library_limits is not None
    p = replace(p, devices=(replace(d, library_limits=replace(d.library_limits, cores=45)),))
    f = claim_limits(p, {})
    assert f is not None and [(g.memory_bytes, g.cores) for g in f.gpus] == [(2 * GiB, 45)]


def test_a_plan_without_the_library_has_no_limits_file() -> None:
    assert claim_limits(plan(claim(result("gpu-0"))), {}) is None


def test_what_is_written_reads_back_line_by_line(tmp_path: Path) -> None:
    lines = (GpuLimitLine(G0, GiB, 30, 0, slot=1, view="/v", ceiling=60), GpuLimitLine(G1, 2 * GiB, 0, 1))
    (tmp_path / LIMITS_FILE_NAME).write_bytes(limits_bytes(LimitsFile("force", 2, lines)))
    assert read_limits(tmp_path) == {G0: lines[0], G1: lines[1]}


@pytest.mark.parametrize(
    "make",
    [
        lambda p: None,  # gone
        lambda p: p.write_text("version 3\n"),  # a version this node cannot read
        lambda p: p.write_text(f"version 1\ngpu {G0} memory lots\n"),  # damaged
        lambda p: p.write_text(
            render_limits(LimitsFile("default", 1, ())) + "#" * MAX_LIMITS_BYTES
        ),  # larger than the library reads
        os.mkfifo,  # never waited on
        lambda p: p.mkdir(),
    ],
    ids=["absent", "newer", "damaged", "too large", "fifo", "directory"],
)
def test_a_file_that_cannot_be_used_reports_no_limits(tmp_path: Path, make) -> None:  # type: ignore[no-untyped-def]
    make(tmp_path / LIMITS_FILE_NAME)
    assert read_limits(tmp_path) == {}
