"""e2e/volcano/build.sh's checks, without building: what it says before it would start a 30-minute build."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

from e2e.volcano.binaries import BUILD_SCRIPT, snapshot


def run(*args: str, cache: Path, shared: Path | None = None) -> subprocess.CompletedProcess[str]:
    env = {**os.environ, "TESSERA_CACHE": str(cache)}
    if shared is not None:
        env["TESSERA_SHARED"] = str(shared)
    return subprocess.run(
        ["bash", str(BUILD_SCRIPT), *args], capture_output=True, text=True, env=env, check=False, timeout=60
    )


def test_check_says_a_build_is_needed_for_an_empty_cache(tmp_path: Path) -> None:
    shared = tmp_path / "shared"
    (shared / "volcano").mkdir(parents=True)
    (shared / "volcano" / f"volcano-src-{snapshot()}.tar.gz").write_bytes(b"a snapshot (not read by --check)")
    result = run("--check", cache=tmp_path, shared=shared)
    assert result.returncode == 3, result.stderr
    assert f"{tmp_path}/volcano/{snapshot()}" in result.stderr


def test_a_missing_snapshot_is_named_with_its_own_exit_code(tmp_path: Path) -> None:
    # 4: make test skips the Volcano scenarios (VOLCANO_OR_SKIP), a check says the same
    for args in ((), ("--check",)):
        result = run(*args, cache=tmp_path / "cache", shared=tmp_path / "shared")
        assert result.returncode == 4, result.stderr
    assert f"volcano-src-{snapshot()}.tar.gz" in result.stderr and "TESSERA_SHARED" in result.stderr
    assert not (tmp_path / "cache" / "volcano").exists()


def test_a_snapshot_with_another_hash_is_refused(tmp_path: Path) -> None:
    (tmp_path / "shared" / "volcano").mkdir(parents=True)
    (tmp_path / "shared" / "volcano" / f"volcano-src-{snapshot()}.tar.gz").write_bytes(b"not the snapshot")
    result = run(cache=tmp_path / "cache", shared=tmp_path / "shared")
    assert result.returncode == 2
    assert "sha256" in result.stderr and "e2e/volcano/snapshot" in result.stderr
    assert not (tmp_path / "cache" / "volcano").exists()


def test_an_unknown_flag_is_refused(tmp_path: Path) -> None:
    assert run("--force", cache=tmp_path).returncode == 2
