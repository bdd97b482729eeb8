"""The things Tessera leaves on a node, as `tessera cleanup` and the host parts' removal reports name them:
`<kind> <target>`."""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class LeftoverKind(StrEnum):
    MPS_DAEMON = "mps-daemon"  # a GPU's MPS control daemon and its directory (target: the GPU UUID)
    MIG_INSTANCE = "mig-instance"  # a MIG instance Tessera created (target: its UUID)
    MIG_MODE = "mig-mode"  # MIG mode Tessera switched on, switched off again (target: the GPU UUID)
    CDI_SPEC = "cdi-spec"  # our CDI spec of a claim, or a temp file of one
    CLAIM_DIR = "claim-dir"  # a claim's limits directory, or a staging/set-aside one
    GPU_VIEW = "gpu-view"  # a shared GPU's view directory
    LIBRARY = "library"  # the interception library installed on the host (and its install's temp file)
    PLUGIN_STATE = (
        "plugin-state"  # the checkpoint, its copies and temp files, the locks, a crash's ready file
    )
    SOCKET = "socket"  # a socket of ours nobody serves any more
    DIRECTORY = "directory"  # a directory only Tessera uses, removed once empty


@dataclass(frozen=True, slots=True)
class Leftover:
    """One thing on the node: `kind` what it is (a LeftoverKind, or a host part's own word), `target` which
    one (a host path, or the UUID of a GPU or a MIG instance)."""

    kind: str
    target: str

    def __str__(self) -> str:
        return f"{self.kind} {self.target}"
