"""`python -m e2e.benches.scale.publishers`: the node plugin's real slice publisher for many simulated nodes
in one process, so that a hundred nodes do not need a hundred daemons.

Each node gets what its daemon would run: the simulated backend's inventory for the node file (UUIDs seeded
by the node's name), `build_slices` with the node's settings, and `SlicePublisher.run` (publish, watch the
pool, republish on foreign changes, resync every 300 s) in a thread of its own. Nothing is prepared: these
nodes only publish. It runs until SIGTERM.
"""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes import client as k8s
from kubernetes import config as k8s_config

from dra_driver.backends.sim_node import decode_node
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.io.logs import configure
from dra_driver.io.settings_file import load_settings
from kubelet_plugin.publish.publisher import SlicePublisher

log = structlog.get_logger(__name__)


def node_inventory(node_file: Path, settings_file: Path | None, name: str) -> tuple[Any, NodeSettings]:
    """The inventory of `node_file` as node `name`, and that node's settings."""
    raw = yaml.safe_load(node_file.read_text(encoding="utf-8"))
    backend = SimulatedBackend(
        node=decode_node({**raw, "nodeName": name}, default_name=name), state_file=None
    )
    try:
        inventory = backend.inventory()
    finally:
        backend.close()
    return inventory, load_settings(settings_file, name)


def _client(kubeconfig: Path, connections: int) -> k8s.ApiClient:
    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    # every node's watch holds a connection while it streams
    configuration.connection_pool_maxsize = connections
    return k8s.ApiClient(configuration)


def publish_inventories(
    *, kubeconfig: Path, nodes: Sequence[tuple[str, Any, NodeSettings]], stop: threading.Event
) -> list[threading.Thread]:
    """Runs the publisher of each (node name, inventory, settings) in a thread of its own until `stop`."""
    api = _client(kubeconfig, 2 * len(nodes) + 4)
    threads = []
    for name, inventory, settings in nodes:
        publisher = SlicePublisher(api=k8s.ResourceV1Api(api), node_name=name)

        def desired(degraded: bool, inventory: Any = inventory, settings: NodeSettings = settings) -> Any:
            return build_slices(inventory, settings, degraded=degraded)

        thread = threading.Thread(
            target=publisher.run,
            kwargs={"desired": desired, "stop": stop},
            name=f"publish-{name}",
            daemon=True,
        )
        thread.start()
        threads.append(thread)
    return threads


def publish_nodes(
    *,
    kubeconfig: Path,
    node_file: Path,
    settings_file: Path | None,
    names: Sequence[str],
    stop: threading.Event,
) -> list[threading.Thread]:
    nodes = [(name, *node_inventory(node_file, settings_file, name)) for name in names]
    return publish_inventories(kubeconfig=kubeconfig, nodes=nodes, stop=stop)


def run_until_stopped(threads: list[threading.Thread], stop: threading.Event, *, nodes: int) -> int:
    """Waits for SIGTERM (`stop`), then for the publishers' threads to end."""
    log.warning("publishers.started", nodes=nodes)
    while not stop.wait(1.0):
        pass
    for thread in threads:
        thread.join(timeout=15)  # an open watch ends within its 10 s
    return 0


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.scale.publishers", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--node-file", type=Path, required=True, help="a SimulatedNode file (e2e/nodes/)")
    parser.add_argument("--settings", type=Path, help="NodeSettings file, as the daemon's --settings")
    parser.add_argument("--names", required=True, help="comma-separated node names")
    args = parser.parse_args(argv)
    configure(level="warning")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    names = [n for n in args.names.split(",") if n]
    threads = publish_nodes(
        kubeconfig=args.kubeconfig,
        node_file=args.node_file,
        settings_file=args.settings,
        names=names,
        stop=stop,
    )
    return run_until_stopped(threads, stop, nodes=len(names))


if __name__ == "__main__":
    sys.exit(main())
