"""The `volcano` fixture: Volcano's scheduler and controller manager on the package's control plane (import it
into a conftest.py beside `control_plane`). It fails, naming `make volcano`, when the binaries are missing or
stale, and skips, saying why, where no Volcano snapshot is beside the checkout to build them from (../shared,
or TESSERA_SHARED)."""

from __future__ import annotations

import pytest

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.launcher import ControlPlane
from e2e.volcano.binaries import VolcanoSnapshotMissingError, ensure_built
from e2e.volcano.launcher import Volcano


def start_volcano(plane: ControlPlane) -> Volcano:
    """Volcano started on `plane`, or the test skipped (no snapshot to build from) or failed (binaries missing
    or stale), as the module's docstring says; for fixtures of any scope."""
    try:
        return Volcano(plane=plane, binaries=ensure_built()).start()
    except VolcanoSnapshotMissingError as e:
        pytest.skip(f"Volcano cannot be built here: {e}")
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)


@pytest.fixture(scope="package")
def volcano(control_plane: ControlPlane) -> Volcano:
    """Volcano beside the default kube-scheduler; it runs until the plane stops (its components are the
    plane's)."""
    return start_volcano(control_plane)
