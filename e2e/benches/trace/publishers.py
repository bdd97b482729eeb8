"""The trace's GPU nodes' pools, each written once by the node plugin's real slice publisher
(`SlicePublisher.publish`, what the daemon runs first), each node's inventory that of the simulated backend
for its GPUs.

A trace node of `gpu` GPUs of `model` becomes a simulated node with that many GPUs of the model's product
(e2e.benches.trace.gpu_models), UUIDs seeded by the node's name; it publishes with the default NodeSettings
(or the bench's `--settings`) as the daemon would. Nothing is left watching the pools afterwards: the
daemon's watch answers changes made by others, and a replay makes none, while 1,213 watches relisting every
10 s are more than a 2-core control plane serves (docs/performance.md, "A production trace")."""

from __future__ import annotations

import time
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import structlog
from kubernetes import client as k8s

from dra_driver.backends.sim_node import (
    DEFAULT_CUDA_DRIVER_VERSION,
    DEFAULT_DRIVER_VERSION,
    SimGpu,
    SimulatedNode,
    gpu_uuid,
)
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.slices import build_slices
from dra_driver.io.settings_file import load_settings
from dra_driver.vocabulary.errors import PublishError
from dra_driver.vocabulary.inventory import Inventory
from e2e.benches.trace.gpu_models import model
from e2e.benches.trace.records import TraceNode
from kubelet_plugin.publish.publisher import SlicePublisher

log = structlog.get_logger(__name__)

PUBLISH_ATTEMPTS = 5  # a busy API server may time a write out; the publisher's own retry is for conflicts


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


def publish_pool(*, api: k8s.ApiClient, node: TraceNode, settings: Path | None) -> int:
    """`node`'s pool as its daemon would write it; the slices written."""
    slices = build_slices(inventory_of(node), load_settings(settings, node.name))
    publisher = SlicePublisher(api=k8s.ResourceV1Api(api), node_name=node.name)
    attempt = 1
    while True:
        try:
            return publisher.publish(slices).writes
        except PublishError as e:
            if attempt >= PUBLISH_ATTEMPTS:
                raise
            log.warning("trace.publish_retry", node=node.name, attempt=attempt, error=str(e))
            time.sleep(0.5 * 2**attempt)
            attempt += 1


def publish_pools(
    *, api: k8s.ApiClient, nodes: Sequence[TraceNode], settings: Path | None, workers: int = 8
) -> int:
    """Every GPU node's pool, `workers` nodes at a time; the slices written in all."""
    with ThreadPoolExecutor(max_workers=workers) as pool:
        return sum(
            pool.map(lambda n: publish_pool(api=api, node=n, settings=settings), [n for n in nodes if n.gpus])
        )
