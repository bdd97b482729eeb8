"""Where e2e/realnode/build.sh puts the node's binaries and images, and whether they are up to date."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

from e2e.controlplane.settings import K8S_VERSION
from e2e.realnode.errors import RealNodeError

BUILD_SCRIPT = Path(__file__).resolve().parent / "build.sh"
_NEEDS_BUILD = 3


@dataclass(frozen=True, slots=True)
class NodeBinaries:
    kubelet: Path
    containerd: Path
    shim: Path
    ctr: Path
    runc: Path
    pause: Path  # also PID 1 of the node's namespaces
    cni_dir: Path
    images: tuple[Path, ...]  # OCI archives to import into containerd's k8s.io namespace


def output_dir() -> Path:
    cache = os.environ.get("TESSERA_CACHE") or str(Path.home() / ".cache" / "tessera")
    return Path(cache) / "realnode"


def binaries_in(directory: Path) -> NodeBinaries:
    bin_dir = directory / "bin"
    return NodeBinaries(
        kubelet=directory / f"k8s-{K8S_VERSION}" / "kubelet",  # the control plane's release
        containerd=bin_dir / "containerd",
        shim=bin_dir / "containerd-shim-runc-v2",
        ctr=bin_dir / "ctr",
        runc=bin_dir / "runc",
        pause=bin_dir / "pause",
        cni_dir=directory / "cni",
        images=(directory / "images" / "pause.oci.tar", directory / "images" / "probe.oci.tar"),
    )


def check_built() -> NodeBinaries:
    """The binaries when build.sh says they are up to date; RealNodeError naming the command otherwise."""
    try:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, check=False
        )
    except OSError as e:
        raise RealNodeError(f"cannot run {BUILD_SCRIPT}: {e}") from e
    if result.returncode == _NEEDS_BUILD:
        raise RealNodeError(
            f"the real node's components are missing or stale ({result.stderr.strip()}): "
            f"run `bash {BUILD_SCRIPT}` (make test does)"
        )
    if result.returncode != 0:
        raise RealNodeError(f"{BUILD_SCRIPT} --check failed ({result.returncode}): {result.stderr.strip()}")
    return binaries_in(output_dir())
