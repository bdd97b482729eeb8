"""What an MPS claim's containers get of their GPU's control daemon: a directory of their own holding one hard
link to the daemon's `control` socket, and nothing else (I/O adapter; docs/mps.md, "Who may command the
daemon").

    <mps root>/<GPU UUID>/clients/<claim uid>/control    a hard link to <GPU UUID>/pipe/control

The directory is mounted read-only as the container's CUDA_MPS_PIPE_DIRECTORY: a client finds `control` and
connects (connect() needs write permission on the socket, which a read-only mount does not take away), but a
process in the container, root included, can neither replace nor remove it (EROFS), and it never sees the
pipe directory's `control_privileged` socket, the pid file or the logs. A hard link names the socket the
daemon bound, so a socket put at `pipe/control` later (a daemon replaced behind our back) reaches no client
until the plugin links again (`link_all`, after it restarted the daemon).
"""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from dra_driver.io.files import temp_name
from dra_driver.io.safe_tree import remove_tree
from dra_driver.vocabulary.errors import InvalidNameError, StorageError
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.node.file_modes import make_dir

# clients/<uid>/: a link to the control socket, mounted read-only into the claim (traversable, like the tree)
MPS_CLIENT_DIR_MODE = 0o755
CONTROL = "control"
CLIENTS = "clients"


class MpsClientDirs:
    def __init__(self, *, gpu_dir: Path) -> None:
        self._gpu_dir = gpu_dir

    @property
    def root(self) -> Path:
        return self._gpu_dir / CLIENTS

    def path(self, uid: ClaimUID) -> Path:
        return self.root / ClaimUID(uid)

    def link(self, uid: ClaimUID) -> Path:
        """The claim's client directory, `control` in it linked to the daemon's socket (atomically)."""
        d = self.path(uid)
        try:
            make_dir(self.root, MPS_CLIENT_DIR_MODE)
            make_dir(d, MPS_CLIENT_DIR_MODE)
            staged = temp_name(d / CONTROL)
            os.link(self._gpu_dir / "pipe" / CONTROL, staged, follow_symlinks=False)
            os.replace(staged, d / CONTROL)
        except OSError as e:
            raise StorageError(f"MPS client directory {d}: {e.strerror or e}") from e
        return d

    def link_all(self) -> list[ClaimUID]:
        """Link every claim's directory again (after the daemon was restarted: its socket is a new one)."""
        linked = []
        for uid in self.uids():
            self.link(uid)
            linked.append(uid)
        return linked

    def uids(self) -> list[ClaimUID]:
        try:
            names = sorted(os.listdir(self.root))
        except FileNotFoundError:
            return []
        out = []
        for n in names:
            with contextlib.suppress(InvalidNameError):  # only the plugin writes here: nothing else to keep
                out.append(ClaimUID(n))
        return out

    def stale(self) -> list[ClaimUID]:
        """Claims whose `control` is not the socket at `pipe/control` (or is missing)."""
        try:
            current = os.stat(self._gpu_dir / "pipe" / CONTROL, follow_symlinks=False).st_ino
        except FileNotFoundError:
            current = None
        out = []
        for uid in self.uids():
            try:
                ino: int | None = os.stat(self.path(uid) / CONTROL, follow_symlinks=False).st_ino
            except FileNotFoundError:
                ino = None
            if ino is None or ino != current:
                out.append(uid)
        return out

    def remove(self, uid: ClaimUID) -> bool:
        return remove_tree(self.path(uid)) > 0
