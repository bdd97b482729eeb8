"""The modes the node daemon gives what it creates; docs/security.md says why for each. What a family's host
part creates gets its mode in that part's own module (hosts/mps/control.py, hosts/mps/clients.py,
hosts/vgpu/__init__.py), from `make_dir` here.

The daemon sets its own umask (UMASK) when it starts, and every file, directory and socket it creates also
gets its mode explicitly, so an inherited umask (000 included) changes nothing. Only the accounting region is
world-writable, and it sits in a root-only tree (CLAIMS_ROOT_MODE).
"""

from __future__ import annotations

import os
import stat
from pathlib import Path
from typing import Literal

import structlog

from cdi.writer import SPEC_MODE
from dra_driver.vocabulary.errors import StorageError

UMASK = 0o077

PLUGIN_DIR_MODE = 0o700  # DRA socket, checkpoint, lock: the daemon and the kubelet (root) only
REGISTRY_DIR_MODE = 0o700  # only when we create it (tests); the kubelet's own directory is left as it is
SOCKET_MODE = 0o600  # whoever can connect can prepare and unprepare claims: root only
CHECKPOINT_MODE = 0o600
LOCK_MODE = 0o600
CDI_DIR_MODE = 0o755  # container runtimes read it, other vendors write theirs: never group/world-writable
CDI_SPEC_MODE = SPEC_MODE  # 0644: runtimes read it; it holds no secret
CLAIMS_ROOT_MODE = 0o700  # containers get their claim dir by bind mount, never through this root
CLAIM_DIR_MODE = 0o755  # the daemon's per claim: limits + shared/; never mounted itself
SHARED_DIR_MODE = 0o755  # mounted read-write as the container's claim dir; any uid reads it
LIMITS_MODE = 0o644  # read by the library as any uid (a read-only file mount); written only by the daemon
MOUNT_POINT_MODE = 0o444  # shared/limits: the empty file the read-only limits mount covers
REGION_MODE = 0o666  # the one exception: any uid of the claim's containers maps it read-write

ExistingDir = Literal["set", "tighten", "keep"]
log = structlog.get_logger(__name__)


def set_umask() -> int:
    """The daemon's own umask; returns the inherited one."""
    return os.umask(UMASK)


def make_dir(path: Path, mode: int, *, existing: ExistingDir = "set") -> None:
    """Create `path` with `mode` (missing parents: 0755 less the umask).

    For a directory that already exists, `existing` says what to do: "set" its mode (ours), "tighten" it
    (shared with others: only take group and world write access away), or "keep" it (another component's).
    """
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        try:
            os.mkdir(path, mode)
            created = True
        except FileExistsError:
            created = False
        current = stat.S_IMODE(os.stat(path).st_mode)
        if created or existing == "set":
            wanted = mode
        elif existing == "tighten":
            wanted = current & ~0o022
        else:
            return
        if current != wanted:
            os.chmod(path, wanted)
    except OSError as e:
        raise StorageError(f"creating {path} with mode {oct(mode)}: {e.strerror or e}") from e
    if current != wanted and not created:
        log.warning("directory mode corrected", path=str(path), was=oct(current), now=oct(wanted))
