"""The kinds of things Tessera leaves on a node, as `tessera cleanup` and the host parts' removal reports
name them."""

from __future__ import annotations

from enum import StrEnum


class LeftoverKind(StrEnum):
    MPS_DAEMON = "mps-daemon"  # a GPU's MPS control daemon and its directory (target: the GPU UUID)
    MIG_INSTANCE = "mig-instance"  # a MIG instance Tessera created (target: its UUID)
    MIG_MODE = "mig-mode"  # MIG mode Tessera switched on, switched off again (target: the GPU UUID)
    CDI_SPEC = "cdi-spec"  # our CDI spec of a claim, or a temp file of one
    CLAIM_DIR = "claim-dir"  # a claim's limits directory, or a staging/set-aside one
    GPU_VIEW = "gpu-view"  # a shared GPU's view directory
    LIBRARY = "library"  # the interception library installed on the host (and its install's temp file)
    PLUGIN_STATE = "plugin-state"  # the checkpoint, its set-aside copies and temp files, the plugin lock
    SOCKET = "socket"  # a socket of ours nobody serves any more
    DIRECTORY = "directory"  # a directory only Tessera uses, removed once empty
