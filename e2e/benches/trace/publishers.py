"""`python -m e2e.benches.trace.publishers`: the node plugin's real slice publisher for many trace nodes in
one process (e2e.benches.scale.publishers), each node's inventory that of the simulated backend for its GPUs.

A trace node of `gpu` GPUs of `model` becomes a simulated node with that many GPUs of the model's product
(e2e.benches.trace.gpu_models), UUIDs seeded by the node's name; it publishes with the default NodeSettings
(or `--settings`) as the daemon would. It runs until SIGTERM."""

from __future__ import annotations

import argparse
import signal
import sys
import threading
from pathlib import Path

from dra_driver.backends.sim_node import (
    DEFAULT_CUDA_DRIVER_VERSION,
    DEFAULT_DRIVER_VERSION,
    SimGpu,
    SimulatedNode,
    gpu_uuid,
)
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.io.logs import configure
from dra_driver.io.settings_file import load_settings
from dra_driver.vocabulary.inventory import Inventory
from e2e.benches.scale.publishers import publish_inventories, run_until_stopped
from e2e.benches.trace.gpu_models import model
from e2e.benches.trace.records import TraceNode, parse_nodes


def simulated_node(node: TraceNode) -> SimulatedNode:
    product = model(node.model)
    gpus = tuple(
        SimGpu(
            index=i,
            uuid=gpu_uuid(node.name, i),
            product=product,
            pci_bus_id=f"00000000:{0x18 + 0x10 * i:02X}:00.0",
            mig_enabled=False,
            healthy=True,
            admin_instances=(),
        )
        for i in range(node.gpus)
    )
    return SimulatedNode(
        node_name=node.name,
        seed=node.name,
        driver_version=DEFAULT_DRIVER_VERSION,
        cuda_driver_version=DEFAULT_CUDA_DRIVER_VERSION,
        gpus=gpus,
    )


def inventory_of(node: TraceNode) -> Inventory:
    backend = SimulatedBackend(node=simulated_node(node), state_file=None)
    try:
        return backend.inventory()
    finally:
        backend.close()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.trace.publishers", description=__doc__)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--nodes", type=Path, required=True, help="the trace's node list (CSV)")
    parser.add_argument("--settings", type=Path, help="NodeSettings file, as the daemon's --settings")
    parser.add_argument("--names", required=True, help="comma-separated names of the nodes to publish")
    args = parser.parse_args(argv)
    configure(level="warning")
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    names = {n for n in args.names.split(",") if n}
    nodes = [
        n
        for n in parse_nodes(args.nodes.read_text(encoding="utf-8"), what=str(args.nodes))
        if n.name in names
    ]
    missing = names - {n.name for n in nodes}
    if missing:
        parser.error(f"{args.nodes} has no node {sorted(missing)[0]}")
    published = [(n.name, inventory_of(n), load_settings(args.settings, n.name)) for n in nodes]
    threads = publish_inventories(kubeconfig=args.kubeconfig, nodes=published, stop=stop)
    return run_until_stopped(threads, stop, nodes=len(published))


if __name__ == "__main__":
    sys.exit(main())
