"""Where the upstream binaries live, and building them with e2e/cluster/build.sh."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path

import structlog

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.settings import K8S_VERSION

log = structlog.get_logger(__name__)

BUILD_SCRIPT = Path(__file__).resolve().parent.parent / "cluster" / "build.sh"
_NEEDS_BUILD = 3


@dataclass(frozen=True, slots=True)
class Binaries:
    etcd: Path
    kube_apiserver: Path
    kube_controller_manager: Path
    kube_scheduler: Path
    kubectl: Path


def bin_dir(version: str = K8S_VERSION) -> Path:
    cache = os.environ.get("TESSERA_CACHE") or str(Path.home() / ".cache" / "tessera")
    return Path(cache) / f"k8s-{version}" / "bin"


def _build_env(version: str) -> dict[str, str]:
    return {**os.environ, "K8S_VERSION": version}


def binaries_in(directory: Path) -> Binaries:
    return Binaries(
        etcd=directory / "etcd",
        kube_apiserver=directory / "kube-apiserver",
        kube_controller_manager=directory / "kube-controller-manager",
        kube_scheduler=directory / "kube-scheduler",
        kubectl=directory / "kubectl",
    )


def is_up_to_date(version: str = K8S_VERSION) -> bool:
    """Asks build.sh whether its stamp matches go.mod, go.sum, the script and the Go version."""
    try:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--check"],
            capture_output=True,
            text=True,
            check=False,
            env=_build_env(version),
        )
    except OSError as e:
        raise ControlPlaneError(f"cannot run {BUILD_SCRIPT}: {e}") from e
    if result.returncode not in (0, _NEEDS_BUILD):
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} --check failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result.returncode == 0


def ensure_built(*, allow_build: bool, version: str = K8S_VERSION) -> Binaries:
    """Returns the binaries of Kubernetes `version`, building them first when allowed. A cold build takes
    tens of minutes on 2 cores, so tests only check and name the command instead."""
    if is_up_to_date(version):
        return binaries_in(bin_dir(version))
    if not allow_build:
        raise ControlPlaneError(
            f"the Kubernetes {version} binaries in {bin_dir(version)} are missing or stale: run "
            f"`K8S_VERSION={version} bash {BUILD_SCRIPT}` (or `make cluster K8S_VERSION={version}`) first, "
            "or set TESSERA_E2E_BUILD=1 to build from the tests"
        )
    log.info("binaries.build", script=str(BUILD_SCRIPT), version=version, note="a cold build takes 10-20 min")
    try:
        # build.sh's progress goes to our stderr; its stdout's last line is the bin directory.
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT)],
            stdout=subprocess.PIPE,
            text=True,
            check=True,
            env=_build_env(version),
        )
    except subprocess.CalledProcessError as e:
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} failed with exit code {e.returncode}; see its output above"
        ) from e
    built = Path(result.stdout.strip().splitlines()[-1])
    return binaries_in(built)
