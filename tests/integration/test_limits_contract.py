"""The Python -> C contract: limits files the node plugin renders, read by the interception library's own
parser (interceptor/src/config.c through interceptor/tests/tlimits), give exactly the limits that were
rendered. docs/architecture.md, "The Python ↔ C contract"."""

from __future__ import annotations

import os
import subprocess
import tempfile
from pathlib import Path

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.core.settings import family_settings
from dra_driver.libtessera.limits_file import (
    LibraryLimits,
    LimitsFile,
    limits_file,
    parse_limits,
    render_limits,
)
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.names import GpuUUID
from tests.support.doubles.interceptor_programs import TLIMITS
from tests.support.prepare_env import Env, backend_env, claim, opaque, vgpu

CHECKS = settings(
    max_examples=60,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)


def read_by_the_library(claim_dir: Path, uuids: list[str]) -> dict[str, dict[str, str]]:
    """What config.c makes of the claim directory: "policy"/"loglevel" and one entry per UUID."""
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "GPU_CORE", "LIBCUDA", "TESSERA"))
    }
    env["TESSERA_CLAIM_DIRS"] = str(claim_dir)
    out = subprocess.run([str(TLIMITS), *uuids], env=env, capture_output=True, text=True, check=True)
    assert "ignoring this limits file" not in out.stderr, out.stderr
    seen: dict[str, dict[str, str]] = {}
    for line in out.stdout.splitlines():
        words = line.split()
        if words[0] == "gpu":
            seen[words[1]] = dict(zip(words[2::2], words[3::2], strict=True)) if len(words) > 3 else {}
        else:
            seen[words[0]] = {"value": words[1]}
    return seen


def assert_same(f: LimitsFile, seen: dict[str, dict[str, str]]) -> None:
    assert seen["policy"]["value"] == f.policy
    assert int(seen["loglevel"]["value"]) == f.log_level
    assert int(seen["limits"]["value"]) == len(f.gpus)
    for g in f.gpus:
        got = seen[g.gpu_uuid]
        assert int(got["memory"]) == g.memory_bytes and int(got["cores"]) == g.cores
        assert int(got["priority"]) == g.priority
        assert int(got["slot"]) == (g.slot or 0) and got["view"] == (g.view or "-")
        # the library ignores a ceiling that is not above the guarantee (nothing to burst to)
        assert int(got["ceiling"]) == (g.ceiling if g.ceiling > g.cores else 0)
        assert got["resident"] == (str(g.resident) if g.resident is not None else "-")


uuids = st.uuids().map(lambda u: GpuUUID(f"GPU-{u}"))


@CHECKS
@given(
    policy=st.sampled_from(["default", "force", "disable"]),
    log_level=st.integers(0, 4),
    gpus=st.lists(
        st.tuples(
            uuids,
            st.integers(1 << 20, 1 << 40),
            st.integers(0, 100),
            st.booleans(),
            st.integers(0, 100),
            st.none() | st.floats(0, 1),  # opted into oversubscription: the share of memory on the device
        ),
        max_size=8,
        unique_by=lambda g: g[0],
    ),
    priority=st.integers(0, 1),
)
def test_what_python_renders_the_library_reads(
    tmp_path: Path,
    policy: str,
    log_level: int,
    gpus: list[tuple[GpuUUID, int, int, bool, int, float | None]],
    priority: int,
) -> None:
    limits = [
        LibraryLimits(
            gpu_index=i,
            gpu_uuid=u,
            memory_bytes=m,
            cores=c,
            priority=priority,
            ceiling=ceil,
            time_sliced=t,
            resident_bytes=None if held is None else int(m * held),
        )
        for i, (u, m, c, t, ceil, held) in enumerate(gpus)
    ]
    slots = {g[0]: i + 1 for i, g in enumerate(gpus)}
    f = limits_file(policy=policy, log_level=log_level, limits=limits, slots=slots)
    claim_dir = Path(tempfile.mkdtemp(dir=tmp_path))  # hypothesis reuses tmp_path for every example
    (claim_dir / LIMITS_FILE_NAME).write_text(render_limits(f))
    assert_same(f, read_by_the_library(claim_dir, [str(g[0]) for g in gpus]))


def test_a_prepared_claims_file_reads_the_same_in_c_and_python(tmp_path: Path) -> None:
    with backend_env(tmp_path, "simulated") as env:
        assert_prepared(env)


def assert_prepared(env: Env) -> None:
    c = claim(
        "shared",
        vgpu(0, memory="3Gi", cores="30", request="a"),
        vgpu(1, memory="1Gi", cores="0", request="b"),
        configs=[opaque("VgpuConfig", smLimitPolicy="force", logLevel=3, coresLimit=80, source="FromClass")],
    )
    (ref,) = env.put(c)
    assert env.preparer().prepare([ref])[ref.uid].error is None
    claim_dir = env.paths.claims_dir / ref.uid
    f = parse_limits((claim_dir / LIMITS_FILE_NAME).read_text())
    gpus = env.inventory().gpus
    # the class's ceiling lifts the 30 % share to 80; a share without cores has no limit to lift
    assert [(g.gpu_uuid, g.memory_bytes, g.cores, g.ceiling) for g in f.gpus] == [
        (gpus[0].uuid, 3 << 30, 30, 80),
        (gpus[1].uuid, 1 << 30, 0, 0),
    ]
    assert all(g.slot == 1 and g.view is not None for g in f.gpus)
    assert_same(f, read_by_the_library(claim_dir, [g.gpu_uuid for g in f.gpus]))


def test_an_oversubscribed_claims_file_reads_the_same_in_c_and_python(tmp_path: Path) -> None:
    """A claim that opted in, prepared on a node with memoryOversubscription 2: the file is version 3 and the
    library reads its whole limit and what the device holds for it."""
    with backend_env(tmp_path, "simulated") as env:
        c = claim(
            "spilling",
            vgpu(0, memory="3Gi", cores="0", virtual="5Gi"),
            configs=[opaque("VgpuConfig", memoryOversubscription="enabled")],
        )
        (ref,) = env.put(c)
        preparer = env.preparer(settings=family_settings(memoryOversubscription=2))
        assert preparer.prepare([ref])[ref.uid].error is None
        claim_dir = env.paths.claims_dir / ref.uid
        text = (claim_dir / LIMITS_FILE_NAME).read_text()
        assert text.startswith("version 3\n")
        f = parse_limits(text)
        assert [(g.memory_bytes, g.resident) for g in f.gpus] == [(8 << 30, 3 << 30)]
        seen = read_by_the_library(claim_dir, [g.gpu_uuid for g in f.gpus])
        assert_same(f, seen)
        assert seen[f.gpus[0].gpu_uuid]["resident"] == str(3 << 30)


# the pieces a hostile or broken limits file is made of: good lines, near misses and plain garbage
_WORDS = st.sampled_from(
    [
        "version", "1", "2", "3", "resident", "policy", "force", "default", "disable", "loglevel", "9", "gpu",
        "GPU-0000aaaa", "MIG-1", "memory", "cores", "priority", "slot", "view", "/v", "context", "1g", "512m",
        "-1", "101",
        "18446744073709551616", "#", "\x00", "\xff", "é", " ", "\t",
    ]
)  # fmt: skip
_LINES = st.lists(_WORDS, max_size=12).map(" ".join) | st.text(max_size=80)


@settings(
    max_examples=150,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture],
)
@given(lines=st.lists(_LINES, max_size=20), cut=st.integers(0, 4000))
def test_garbage_never_crashes_or_hangs_the_library_parser(
    tmp_path: Path, lines: list[str], cut: int
) -> None:
    """Seeded fuzz of interceptor/src/config.c through its test entry point: whatever the file holds, the
    reader finishes quickly and either uses it or refuses all of it with one log line."""
    claim_dir = Path(tempfile.mkdtemp(dir=tmp_path))
    data = ("\n".join(lines)).encode("utf-8", "surrogateescape")
    (claim_dir / LIMITS_FILE_NAME).write_bytes(data[: cut or None])
    env = {
        k: v for k, v in os.environ.items() if not k.startswith(("CUDA_", "GPU_CORE", "LIBCUDA", "TESSERA"))
    }
    env["TESSERA_CLAIM_DIRS"] = str(claim_dir)
    done = subprocess.run(
        [str(TLIMITS), "GPU-0000aaaa"], env=env, capture_output=True, timeout=10, check=False
    )
    assert done.returncode == 0, done.stderr[-500:]
    refused = done.stderr.count(b"ignoring this limits file")
    assert refused <= 1
    if refused:
        assert b"limits 0" in done.stdout
