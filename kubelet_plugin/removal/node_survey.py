"""What of Tessera's a node holds, found where Tessera puts it (`PluginPaths`): the I/O half of
`kubelet_plugin.removal.cleanup_plan`, which decides what of it goes.

Only names Tessera writes are listed: our CDI specs (never another vendor's), the claim directories and GPU
views, what the host parts keep and run (the MPS control daemons and their directories), the installed
library and its install's temp file, the checkpoint (with its set-aside copies and temp files) and the plugin
lock, sockets of ours that nobody serves (a served one belongs to a running instance) and the ready files
of instances gone without removing them (a crash's), and the directories only Tessera uses, last.
"""

from __future__ import annotations

import os
from pathlib import Path

from cdi.writer import list_specs, stale_temp_files
from dra_driver.io.files import is_temp
from dra_driver.vocabulary.errors import InventoryError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import (
    dra_socket_name,
    is_dra_socket_name,
    is_registration_socket_name,
    ready_file_owner,
)
from kubelet_plugin.claims.node_state import NodeState
from kubelet_plugin.claims.recovery import marked_claims
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.node.sockets import is_served
from kubelet_plugin.record.checkpoint import Checkpoint
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind
from kubelet_plugin.removal.cleanup_plan import NodeSurvey, PendingClaim

UNREADABLE_MARK = ".unreadable-"  # CheckpointStore.set_aside's names: checkpoint.json.unreadable-<stamp>


def _names(directory: Path) -> list[str]:
    try:
        return sorted(os.listdir(directory))
    except (FileNotFoundError, NotADirectoryError):
        return []


def _found(kind: LeftoverKind, paths: list[Path]) -> list[Leftover]:
    return [Leftover(kind, str(p)) for p in paths if os.path.lexists(p)]


def _is_socket_name(directory: Path, name: str, paths: PluginPaths) -> bool:
    if directory == paths.registry_dir:
        return is_registration_socket_name(name)
    return is_dra_socket_name(name)


def _sockets(paths: PluginPaths) -> tuple[list[Path], list[Path]]:
    """Our sockets nobody serves (a crash's), and the DRA sockets someone serves."""
    stale, served = [], []
    for directory in (paths.plugin_dir, paths.registry_dir):
        for name in _names(directory):
            path = directory / name
            if not _is_socket_name(directory, name, paths):
                continue
            if not is_served(path):
                stale.append(path)
            elif directory == paths.plugin_dir:
                served.append(path)
    return stale, served


def _stale_ready_files(paths: PluginPaths, served: list[Path]) -> list[Path]:
    """Ready files whose instance serves no DRA socket: a SIGKILLed instance's, its pod since deleted."""
    stale = []
    for name in _names(paths.plugin_dir):
        owner = ready_file_owner(name)
        if owner is not None and paths.plugin_dir / dra_socket_name(owner or None) not in served:
            stale.append(paths.plugin_dir / name)
    return stale


def _plugin_state(paths: PluginPaths) -> list[Path]:
    checkpoint = paths.checkpoint_file.name
    found = [paths.checkpoint_file]
    for name in _names(paths.plugin_dir):
        if name.startswith(checkpoint + UNREADABLE_MARK) or (is_temp(name) and checkpoint in name):
            found.append(paths.plugin_dir / name)
    return [*found, *paths.lock_files]


def library_files(library: Path) -> list[Path]:
    """The installed library and the temp file the chart's install step renames into place."""
    return [library, library.with_name(f".{library.name}.tmp")]


def holds_claim_state(paths: PluginPaths) -> bool:
    """Whether start-up reconciliation has anything to look at: a checkpoint, a spec of ours, a claim dir."""
    return (
        os.path.lexists(paths.checkpoint_file)
        or any(True for _ in list_specs(paths.cdi_dir))
        or bool(_names(paths.claims_dir))
    )


def survey_node(state: NodeState, cp: Checkpoint, *, serving: bool = False) -> NodeSurvey:
    """Everything of Tessera's on the node, and the plugin instances still serving it. `serving`: this
    process serves from the plugin directory, which then stays (its sockets go when it stops)."""
    paths = state.paths
    inventory: Inventory | None = None
    problem = ""
    try:
        inventory = state.backend.inventory()
    except InventoryError as e:
        problem = str(e)
    markers, _ = marked_claims(state, skip=cp.claims)
    stale, served = _sockets(paths)
    files = [
        *_found(LeftoverKind.CDI_SPEC, [p for _, p in list_specs(paths.cdi_dir)]),
        *_found(LeftoverKind.CDI_SPEC, list(stale_temp_files(paths.cdi_dir))),
        *_found(LeftoverKind.CLAIM_DIR, [paths.claims_dir / n for n in _names(paths.claims_dir)]),
        *_found(LeftoverKind.GPU_VIEW, [paths.gpus_dir / n for n in _names(paths.gpus_dir)]),
        *_found(LeftoverKind.LIBRARY, library_files(paths.library_path)),
        *_found(LeftoverKind.PLUGIN_STATE, [*_plugin_state(paths), *_stale_ready_files(paths, served)]),
        *_found(LeftoverKind.SOCKET, stale),
    ]
    host_dirs = [d for part in state.hosts for d in part.state_dirs()]
    roots = [paths.claims_dir, paths.gpus_dir, *host_dirs, paths.library_path.parent]
    files += _found(LeftoverKind.DIRECTORY, roots if serving else [*roots, paths.plugin_dir])
    return NodeSurvey(
        inventory=inventory,
        unrecorded=tuple(
            PendingClaim(namespace=m.entry.namespace, name=m.entry.name, uid=uid)
            for uid, m in sorted(markers.items())
        ),
        on_host=tuple(item for part in state.hosts for item in part.on_host()),
        files=tuple(files),
        inventory_problem=problem,
        serving=tuple(str(p) for p in served if not (serving and p == paths.dra_socket)),
    )
