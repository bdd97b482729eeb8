"""Slices of a simulated node, built by the node plugin's own pure slice builder (what it would publish)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dra_driver.backends.sim_node import decode_node
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices


def slices_for_simulated_node(raw: Mapping[str, Any], *, default_name: str = "sim-node") -> tuple[Any, ...]:
    node = decode_node(dict(raw), default_name=default_name)
    backend = SimulatedBackend(node=node, state_file=None)
    try:
        inventory = backend.inventory()
    finally:
        backend.close()
    return tuple(build_slices(inventory, NodeSettings(node_name=node.node_name)))
