"""Where e2e/volcano/build.sh puts Volcano's binaries and CRDs, and asking it whether they are up to date."""

from __future__ import annotations

import os
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Final

from e2e.controlplane.errors import ControlPlaneError

BUILD_SCRIPT: Final = Path(__file__).resolve().parent / "build.sh"
SNAPSHOT_FILE: Final = Path(__file__).resolve().parent / "snapshot"
_NEEDS_BUILD: Final = 3


def snapshot() -> str:
    """The snapshot's short commit (`ed72c7c815a9`), the first word of e2e/volcano/snapshot."""
    return SNAPSHOT_FILE.read_text(encoding="utf-8").split()[0]


def cache_dir() -> Path:
    cache = os.environ.get("TESSERA_CACHE") or str(Path.home() / ".cache" / "tessera")
    return Path(cache) / "volcano" / snapshot()


@dataclass(frozen=True, slots=True)
class VolcanoBinaries:
    scheduler: Path  # as the snapshot pins its modules (k8s.io/dynamic-resource-allocation v0.36.1)
    scheduler_dra_patched: Path  # the same with k8s.io/dynamic-resource-allocation v0.36.3
    controller_manager: Path
    crd_dir: Path  # the snapshot's config/crd

    def crd_files(self) -> list[Path]:
        """Every CRD the controller manager watches: Volcano's own and the jobflow kinds."""
        return sorted(
            [*self.crd_dir.glob("volcano/bases/*.yaml"), *self.crd_dir.glob("jobflow/bases/*.yaml")]
        )


NO_SNAPSHOT: Final = 4  # build.sh: a build is needed and ../shared/volcano holds no snapshot


class VolcanoSnapshotMissingError(ControlPlaneError):
    """No Volcano to build here: the source snapshot is not beside the checkout."""


def binaries_in(directory: Path) -> VolcanoBinaries:
    return VolcanoBinaries(
        scheduler=directory / "bin" / "vc-scheduler",
        scheduler_dra_patched=directory / "bin" / "vc-scheduler-dra-v0.36.3",
        controller_manager=directory / "bin" / "vc-controller-manager",
        crd_dir=directory / "crd",
    )


def is_up_to_date() -> bool:
    """Asks build.sh whether its stamp matches the snapshot, the script and the Go version."""
    try:
        result = subprocess.run(
            ["bash", str(BUILD_SCRIPT), "--check"], capture_output=True, text=True, check=False
        )
    except OSError as e:
        raise ControlPlaneError(f"cannot run {BUILD_SCRIPT}: {e}") from e
    if result.returncode == NO_SNAPSHOT:
        raise VolcanoSnapshotMissingError(result.stderr.strip())
    if result.returncode not in (0, _NEEDS_BUILD):
        raise ControlPlaneError(
            f"{BUILD_SCRIPT} --check failed ({result.returncode}): {result.stderr.strip()}"
        )
    return result.returncode == 0


def ensure_built() -> VolcanoBinaries:
    """Volcano's binaries, or an error that names the command to build them (a cold build takes about 30
    minutes on 2 cores, so tests never start one)."""
    if not is_up_to_date():
        raise ControlPlaneError(
            f"Volcano's binaries in {cache_dir()} are missing or stale: run `make volcano` "
            f"(bash {BUILD_SCRIPT}) first"
        )
    return binaries_in(cache_dir())
