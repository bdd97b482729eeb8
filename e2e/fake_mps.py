"""The fake `nvidia-cuda-mps-control` (interceptor/fake) for nodes under test, and the cleanup they need: an
MPS control daemon runs in a session of its own so that it outlives a restart of the node plugin, which also
means it outlives a test's node unless the test stops it."""

from __future__ import annotations

from pathlib import Path

from e2e.fake_nvml import FAKE_LIBRARY_DIR
from kubelet_plugin.mps_control import MpsControl

FAKE_MPS_CONTROL = FAKE_LIBRARY_DIR / "nvidia-cuda-mps-control"


def stop_mps_daemons(mps_dir: Path) -> list[str]:
    """Stop every control daemon under a node's MPS directory; the GPUs they served."""
    control = MpsControl(root=mps_dir, tool=str(FAKE_MPS_CONTROL), stop_timeout_s=5.0)
    stopped: list[str] = []
    for state in control.running():
        control.stop(gpu_uuid=state.gpu_uuid)
        stopped.append(state.gpu_uuid)
    return stopped
