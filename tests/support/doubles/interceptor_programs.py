"""Running the interception library's test programs (interceptor/build, from `make dev`) from Python tests
and tools (integration tests, the region reader's unit tests, `make bench-metrics`)."""

from __future__ import annotations

import os
import re
import subprocess
from pathlib import Path

REPO = Path(__file__).resolve().parents[3]
BUILD = REPO / "interceptor" / "build"
LIBRARY = BUILD / "libtessera.so"
TCUDA = BUILD / "tests" / "tcuda"
TSHARE = BUILD / "tests" / "tshare"
TLIMITS = BUILD / "tests" / "tlimits"
TLAYOUT = BUILD / "tests" / "tlayout"
TMPS = BUILD / "tests" / "tmps"
TOVERSUB = BUILD / "tests" / "toversub"  # memory oversubscription: managed memory and its paging
MPS_CONTROL = BUILD / "fake" / "nvidia-cuda-mps-control"
# the fake driver's GPUs, as their UUIDs read
FAKE_GPU0 = "GPU-7e55e7a0-1234-4567-89ab-cdef00000000"
FAKE_GPU1 = "GPU-7e55e7a0-1234-4567-89ab-cdef00000001"


def claim_dir(root: Path, name: str, *lines: str, version: int = 1) -> Path:
    d = root / name
    d.mkdir(parents=True, exist_ok=True)
    (d / "limits").write_text("\n".join((f"version {version}", *lines)) + "\n")
    return d


def container_view(claim: Path) -> Path:
    """What a container's claim directory shows, for a program run on the host without a mount namespace:
    the claim's shared dir, whose limits mount point is replaced by a hard link to the daemon's limits file
    (the file the read-only mount shows in a container)."""
    shared = claim / "shared"
    (shared / "limits").unlink(missing_ok=True)
    os.link(claim / "limits", shared / "limits")
    return shared


def env(claim: Path | None, gpu_state: Path, **extra: str) -> dict[str, str]:
    e = {k: v for k, v in os.environ.items() if not k.startswith(("TESSERA_", "CUDA_", "FAKE_"))}
    e.update(LD_LIBRARY_PATH=str(BUILD / "fake"), FAKE_GPU_STATE=str(gpu_state), FAKE_CTX_BYTES="0")
    if claim is not None:
        e.update(TESSERA_CLAIM_DIRS=str(claim), LD_PRELOAD=str(LIBRARY))
    e.update(extra)
    return e


def start(program: Path, *args: str, env: dict[str, str]) -> subprocess.Popen[str]:
    return subprocess.Popen(
        [str(program), *args], env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    )


def values(output: str, key: str) -> list[float]:
    return [float(v) for v in re.findall(rf"\b{key}=([0-9.]+)", output)]
