"""A simulated node without its daemon: a Node object plus the ResourceSlices the plugin would publish for
an `e2e/nodes/*.yaml` inventory, written by the real publisher. Enough for the scheduler and `tessera
explain`, which only read the API; nothing is prepared on the node."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from kubernetes import client as k8s

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.names import Attr, qualified
from e2e.controlplane.nodes import create_node, delete_node
from kubelet_plugin.publish.publisher import SlicePublisher

Json = dict[str, Any]
NODES_DIR = Path(__file__).resolve().parents[1] / "nodes"


@dataclass(frozen=True, slots=True)
class PublishedNode:
    name: str
    slices: tuple[Json, ...]

    @property
    def devices(self) -> tuple[Json, ...]:
        return tuple(d for s in self.slices for d in s["spec"].get("devices") or [])

    @property
    def counter_sets(self) -> dict[str, dict[str, str]]:
        """counter set name → counter name → value (a quantity string), as published."""
        return {
            cs["name"]: {n: str(c["value"]) for n, c in cs["counters"].items()}
            for s in self.slices
            for cs in s["spec"].get("sharedCounters") or []
        }


def attribute(device: Json, name: str) -> Any:
    """The value of `device`'s attribute `name` (unqualified, in the driver's domain), or None."""
    value = device["attributes"].get(qualified(name))
    return None if value is None else next(iter(value.values()))


def device_type(device: Json) -> str:
    return str(attribute(device, Attr.TYPE))


def slices_for(node_file: Path, *, node_name: str, settings: NodeSettings | None = None) -> tuple[Json, ...]:
    """What the plugin would publish for `node_file` as node `node_name`, with `settings` (default: the
    defaults; their node name must be `node_name`)."""
    if settings is not None and settings.node_name != node_name:
        raise ValueError(f"settings are for node {settings.node_name}, not {node_name}")
    backend = SimulatedBackend.from_file(node_file=node_file, state_file=None)
    try:
        return tuple(build_slices(backend.inventory(), settings or NodeSettings(node_name=node_name)))
    finally:
        backend.close()


@contextmanager
def published_node(
    api: k8s.ApiClient,
    *,
    node_file: Path,
    name: str,
    labels: dict[str, str] | None = None,
    settings: NodeSettings | None = None,
) -> Iterator[PublishedNode]:
    """Creates Node `name`, publishes `node_file`'s slices for it; unpublishes and deletes it on exit."""
    slices = slices_for(node_file, node_name=name, settings=settings)
    create_node(api, name=name, labels=labels)
    publisher = SlicePublisher(api=k8s.ResourceV1Api(api), node_name=name)
    try:
        publisher.publish(list(slices))
        yield PublishedNode(name=name, slices=slices)
    finally:
        try:
            publisher.publish([])
        finally:
            delete_node(api, name=name)
