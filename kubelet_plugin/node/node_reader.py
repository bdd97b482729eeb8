"""One read of this node's Node object every few seconds, for what the daemon learns there: another GPU
device plugin in its capacity (foreign_plugin.py) and the GPUs an administrator cordoned in its annotations
(gpu_cordons.py). One GET of one object (the API server answers it from its watch cache); the plugin's RBAC
allows `get` on nodes and nothing wider, so it cannot watch them.
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Sequence
from typing import Any

from dra_driver.io.rest_calls import RestCalls
from kubelet_plugin.node.foreign_plugin import read_node

# how soon a cordon (or another device plugin) reaches the slices; docs/operations.md says so
READ_INTERVAL_S = 10.0

Observer = Callable[[Any], bool]  # takes the Node's JSON (None: unreadable); True when it changed something


class NodeReader:
    def __init__(
        self,
        *,
        rest: RestCalls,
        node_name: str,
        observers: Sequence[Observer],
        on_change: Callable[[], None],
    ) -> None:
        self._rest, self._node = rest, node_name
        self._observers, self._on_change = tuple(observers), on_change

    def check(self) -> bool:
        """Read the Node once and hand it to every observer; True when one of them changed."""
        node = read_node(self._rest, self._node)
        changed = [observe(node) for observe in self._observers]  # every observer sees every read
        return any(changed)

    def run(self, stop: threading.Event, interval: float = READ_INTERVAL_S) -> None:
        while not stop.wait(interval):
            if self.check():
                self._on_change()
