"""`make image` end to end (deploy/image/build.sh): two builds of layer 2 from the same tree (the shared
cache's and a forced one) give the same manifest digest, an unchanged tree is skipped, and the plugin runs
inside the image's own root file system (chroot, the image's /usr/bin/python3). Needs root, mmdebstrap and
the package registries; minutes."""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from deploy.image import build, oci

BUILD_SH = build.REPO / "deploy" / "image" / "build.sh"
LIMIT_MIB = 250

pytestmark = [
    pytest.mark.slow,
    pytest.mark.timeout(1200),
    pytest.mark.skipif(os.geteuid() != 0, reason="the image build needs root (mmdebstrap, chroot)"),
    pytest.mark.skipif(shutil.which("mmdebstrap") is None, reason="no mmdebstrap (apt-get install it)"),
]


@dataclass(frozen=True)
class Run:
    lines: list[str]
    log: str
    seconds: float

    def field(self, name: str) -> str:
        [value] = [line.split(": ", 1)[1] for line in self.lines if line.startswith(f"{name}: ")]
        return value


SHARED_IMAGES = Path(os.environ.get("TESSERA_CACHE", Path.home() / ".cache" / "tessera")) / "image"


def run_build(cache: Path, *args: str) -> Run:
    start = time.monotonic()
    result = subprocess.run(
        ["bash", str(BUILD_SH), *args],
        env={**os.environ, "TESSERA_CACHE": str(cache)},
        capture_output=True,
        text=True,
        check=False,
    )
    assert result.returncode == 0, result.stderr[-4000:]
    return Run(lines=result.stdout.splitlines(), log=result.stderr, seconds=time.monotonic() - start)


@pytest.fixture(scope="module")
def runs(tmp_path_factory: pytest.TempPathFactory) -> tuple[Run, Run, Run]:
    """The shared cache's build of this tree (the one `make test` made before pytest, a no-op then), a forced
    build of layer 2 into a cache of its own, and a run there that must skip: two builds of one tree at
    different times, one of them paid for by `make test` already."""
    shared = run_build(SHARED_IMAGES.parent)
    # A cache of its own for the forced build: the real node imports the shared archive meanwhile. Layer 1
    # (mmdebstrap's, keyed by its inputs) is linked in from the shared cache.
    cache = tmp_path_factory.mktemp("cache")
    (cache / "image").mkdir()
    for layer in SHARED_IMAGES.glob("rootfs-*.tar"):
        try:
            os.link(layer, cache / "image" / layer.name)
        except OSError:
            shutil.copy2(layer, cache / "image" / layer.name)
    return run_build(cache, "--force"), shared, run_build(cache)


@pytest.fixture(scope="module")
def root(runs: tuple[Run, Run, Run], tmp_path_factory: pytest.TempPathFactory) -> Path:
    unpacked = tmp_path_factory.mktemp("image") / "root"
    build.unpack(Path(runs[0].lines[-1]), unpacked)
    return unpacked


def test_the_same_tree_gives_the_same_digest(runs: tuple[Run, Run, Run]) -> None:
    forced, shared, skipped = runs
    assert re.fullmatch(r"sha256:[0-9a-f]{64}", forced.field("digest"))
    assert forced.field("digest") == shared.field("digest") == skipped.field("digest")


def test_the_summary_and_the_skip(runs: tuple[Run, Run, Run]) -> None:
    first, _, skipped = runs
    keys = [line.split(":", 1)[0] for line in first.lines]
    assert keys == ["image", "digest", "size", "archive", first.lines[-1]]
    assert first.field("image") == build.image_name(build.facts())
    assert first.field("archive") == first.lines[-1] and Path(first.lines[-1]).is_file()
    assert skipped.lines == first.lines
    # the stamp decides, not the clock: a loaded machine hashes slowly, but never as slowly as it builds
    assert "up to date: " in skipped.log and "up to date: " not in first.log
    assert skipped.seconds < first.seconds / 2, "an unchanged tree is not built again"


def test_size_within_the_target(runs: tuple[Run, Run, Run]) -> None:
    m = re.fullmatch(r"(\d+\.\d) MiB", runs[0].field("size"))
    assert m and float(m.group(1)) <= LIMIT_MIB
    manifests = oci.read_index(Path(runs[0].lines[-1]))["manifests"]
    assert isinstance(manifests, list)
    [descriptor] = manifests
    assert descriptor["annotations"]["io.containerd.image.name"] == runs[0].field("image")


def test_the_plugin_runs_in_the_image(root: Path) -> None:
    facts: dict[str, Any] = build.facts()
    build.smoke(root, facts)  # raises with the command's output when one fails
    env = {**facts["env"], "PYTHONPATH": facts["paths"]["site"]}
    probe = subprocess.run(
        ["chroot", str(root), "tessera", "plugin", "probe", "--timeout", "1"],
        env=env,
        capture_output=True,
        text=True,
        check=False,
    )
    # no plugin is running here: the probe loads its gRPC code and says what it found, unhealthy
    assert probe.returncode == 1 and "unhealthy: no socket at" in probe.stderr


def test_what_the_image_holds(root: Path) -> None:
    facts: dict[str, Any] = build.facts()
    site = root / facts["paths"]["site"].lstrip("/")
    launcher = root / facts["paths"]["launcher"].lstrip("/")
    library = root / facts["paths"]["library"].lstrip("/")
    assert launcher.stat().st_mode & 0o777 == 0o755
    assert launcher.read_text().startswith("#!/usr/bin/python3\n")
    assert library.read_bytes()[:4] == b"\x7fELF"
    assert (site / "kubelet_plugin" / "proto" / "gen" / "dra_v1_pb2_grpc.py").is_file()
    for gone in ("kubernetes/aio", "aiohttp", "yarl", "bin"):
        assert not (site / gone).exists(), gone
    assert not list(site.rglob("direct_url.json"))
    compiled = list(site.rglob("*.cpython-311.pyc"))
    assert bool(compiled) == facts["python"]["compile"]
    # the image's Python runs the precompiled modules (hash-based, unchecked), never writes its own
    assert all(p.read_bytes()[4:8] == b"\x01\x00\x00\x00" for p in compiled[:50])  # flags: hash, no check
    assert (root / "bin" / "sh").exists() and (root / "bin").is_symlink()  # the chart's init container
