"""Slices of a simulated node, built by the node plugin's own pure slice builder with the node's settings
(what it would publish): a node group's `sharesPerGpu` or `migProfiles` change its slices, so an answer for
the group needs them."""

from __future__ import annotations

from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dra_driver.backends.sim_node import decode_node
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.slices import build_slices
from dra_driver.io.settings_file import load_settings


def slices_for_simulated_node(
    raw: Mapping[str, Any], *, settings: Path | None = None, default_name: str = "sim-node"
) -> tuple[Any, ...]:
    """`settings`: the node's settings file (`tessera inventory --settings`'s; None: every default), read as
    the node's, whatever `nodeName` it names."""
    node = decode_node(dict(raw), default_name=default_name)
    node_settings = load_settings(settings, node.node_name)
    backend = SimulatedBackend(node=node, state_file=None)
    try:
        inventory = backend.inventory()
    finally:
        backend.close()
    node_settings.check_fits(inventory)  # refused as the node daemon refuses it
    return tuple(build_slices(inventory, node_settings))
