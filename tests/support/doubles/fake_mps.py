"""The fake `nvidia-cuda-mps-control` (interceptor/fake) for nodes under test, and the cleanup they need: an
MPS control daemon runs in a session of its own so that it outlives a restart of the node plugin, which also
means it outlives a test's node unless the test stops it."""

from __future__ import annotations

import hashlib
import os
import tempfile
from pathlib import Path

from dra_driver.core.families import mps
from kubelet_plugin.host_parts.mps.control import LONGEST_SOCKET, SOCKET_PATH_MAX, MpsControl
from kubelet_plugin.node.paths import PluginPaths
from tests.support.doubles.fake_nvml import FAKE_LIBRARY_DIR

FAKE_MPS_CONTROL = FAKE_LIBRARY_DIR / "nvidia-cuda-mps-control"


def stop_mps_daemons(mps_dir: Path) -> list[str]:
    """Stop every control daemon under a node's MPS directory; the GPUs they served."""
    control = MpsControl(root=mps_dir, tool=str(FAKE_MPS_CONTROL), stop_timeout_s=5.0)
    stopped: list[str] = []
    for state in control.running():
        control.stop(gpu_uuid=state.gpu_uuid)
        stopped.append(state.gpu_uuid)
    return stopped


_UUID_LENGTH = len("GPU-00000000-0000-0000-0000-000000000000")


def mps_dir_for(root: Path) -> Path:
    """A node root's MPS directory: its own `var/lib/tessera/mps` when a control socket below it fits a unix
    socket path, else a short directory in /tmp named after the root (a demo cloned deep in a home
    directory), so the same root always gets the same one."""
    own = PluginPaths.under(root).family_dir(mps.NAME)
    if len(os.fsencode(own)) + 1 + _UUID_LENGTH + len(f"/pipe/{LONGEST_SOCKET}") <= SOCKET_PATH_MAX:
        return own
    digest = hashlib.sha256(os.fsencode(root.resolve())).hexdigest()[:10]
    return Path(tempfile.gettempdir()) / f"tessera-mps-{digest}"
