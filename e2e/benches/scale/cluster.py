"""N simulated 8 x H100 nodes on the real control plane, for the scale benchmark.

Every node is a Node object whose pool the real publisher code writes: most nodes from a few publisher
processes (`e2e.benches.scale.publishers`, up to 25 nodes each), a sample of nodes as full simulated nodes
(the node plugin daemon and a kubelet stand-in each, e2e.harness.node.SimNode), so that pods placed there
really run. A layout is the node settings every node publishes with; `set_layout` republishes all of them."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.names import CONFIG_API_VERSION, DRIVER_NAME, NODE_SETTINGS_KIND
from e2e.benches.meters import slice_pages
from e2e.benches.scale.publishers import node_inventory
from e2e.benches.scale.workloads import FAMILIES
from e2e.controlplane.binaries import Binaries
from e2e.controlplane.launcher import ControlPlane, start_control_plane
from e2e.controlplane.nodes import create_node
from e2e.controlplane.processes import is_alive, log_tail, stop_record
from e2e.controlplane.settings import PRODUCTION
from e2e.controlplane.state import ComponentRecord
from e2e.harness.kube import WaitTimeoutError
from e2e.harness.node import SimNode, spawn_python
from e2e.harness.testbed import H100_NODE, SimCluster, make_testbed, start_node

log = structlog.get_logger(__name__)

NODES_PER_PROCESS = 25
LABEL = "tessera.dev/scale"


@dataclass(frozen=True, slots=True)
class Layout:
    """A name, the NodeSettings fields every node publishes with, and the benchmark families it serves."""

    name: str
    fields: dict[str, Any]
    serves: tuple[str, ...] = FAMILIES

    def document(self) -> dict[str, Any]:
        return {"apiVersion": CONFIG_API_VERSION, "kind": NODE_SETTINGS_KIND, **self.fields}


LAYOUTS = {
    # every MIG placement beside whole GPUs and vgpu (the default)
    "all": Layout("all", {}),
    # only the profiles the workloads ask for: without 1g.10gb+me (one instance per GPU at most, yet seven
    # placements) and 1g.20gb
    "fewer": Layout("fewer", {"migProfiles": ["1g.10gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]}),
    # whole GPUs, vgpu, MPS and MIG 1g.10gb (its placements never overlap one another)
    "lean": Layout("lean", {"migProfiles": ["1g.10gb"]}, ("whole", "vgpu", "mig-1g")),
    # vgpu and MIG 1g.10gb on every GPU, nothing else
    "vgpu-mig-1g": Layout(
        "vgpu-mig-1g",
        {"families": {"gpu": False, "mps": False}, "migProfiles": ["1g.10gb"]},
        ("vgpu", "mig-1g"),
    ),
    # node groups with one family each: their pools need no shared counters
    "vgpu-only": Layout("vgpu-only", {"families": {"gpu": False, "mps": False, "mig": False}}, ("vgpu",)),
    "mig-1g-only": Layout(
        "mig-1g-only",
        {"families": {"gpu": False, "vgpu": False, "mps": False}, "migProfiles": ["1g.10gb"]},
        ("mig-1g",),
    ),
}


def layout_shape(layout: Layout) -> tuple[int, int]:
    """(slices, devices) of one 8 x H100 node's pool in `layout`."""
    inventory, _ = node_inventory(H100_NODE, None, "shape")
    settings = NodeSettings.from_mapping(layout.document(), node_name="shape")
    slices = build_slices(inventory, settings)
    return len(slices), sum(len(s["spec"].get("devices") or []) for s in slices)


def pool_shape(slices: list[tuple[int, int, int]]) -> tuple[int, int] | None:
    """(slices, devices) of a listed pool when it is complete (one generation, the count it names)."""
    if not slices or len({g for g, _, _ in slices}) != 1 or {c for _, c, _ in slices} != {len(slices)}:
        return None
    return len(slices), sum(d for _, _, d in slices)


def list_pools(api: k8s.ApiClient) -> dict[str, list[tuple[int, int, int]]]:
    """Pool name → (generation, resourceSliceCount, devices) of each of its slices (Tessera's driver)."""
    pools: dict[str, list[tuple[int, int, int]]] = {}
    for s in slice_pages(api):
        spec = s["spec"]
        if spec["driver"] == DRIVER_NAME:
            pool = spec["pool"]
            pools.setdefault(pool["name"], []).append(
                (pool["generation"], pool["resourceSliceCount"], len(spec.get("devices") or []))
            )
    return pools


def node_name(k: int) -> str:
    return f"scale-{k:03d}"


@dataclass(slots=True)
class ScaleCluster:
    plane: ControlPlane
    api: k8s.ApiClient
    bed: SimCluster
    root: Path
    names: list[str]
    sample: list[SimNode] = field(default_factory=list)
    publishers: list[ComponentRecord] = field(default_factory=list)
    publish_s: float = 0.0  # the last layout: publishers started (or plugins restarted) → every pool complete

    @property
    def settings_file(self) -> Path:
        return self.root / "settings.yaml"

    @property
    def sample_names(self) -> list[str]:
        return [n.name for n in self.sample]

    def publisher_pids(self) -> list[int]:
        return [p.pid for p in self.publishers]

    def _start_publishers(self) -> None:
        bulk = self.names[len(self.sample) :]
        for k in range(0, len(bulk), NODES_PER_PROCESS):
            chunk = bulk[k : k + NODES_PER_PROCESS]
            self.publishers.append(
                spawn_python(
                    name=f"publishers-{k // NODES_PER_PROCESS}",
                    args=[
                        "-m",
                        "e2e.benches.scale.publishers",
                        f"--kubeconfig={self.plane.kubeconfig}",
                        f"--node-file={H100_NODE}",
                        f"--settings={self.settings_file}",
                        f"--names={','.join(chunk)}",
                    ],
                    log_path=self.root / "logs" / f"publishers-{k // NODES_PER_PROCESS}.log",
                    die_with_parent=True,
                )
            )

    def _stop_publishers(self) -> None:
        for record in self.publishers:
            stop_record(record, grace_s=20.0)
        self.publishers.clear()

    def set_layout(self, layout: Layout, *, timeout_s: float = 600.0) -> float:
        """Every node republishes with `layout`; returns the seconds until every pool was complete."""
        self.settings_file.write_text(yaml.safe_dump(layout.document()), encoding="utf-8")
        started = time.monotonic()
        self._stop_publishers()
        for node in self.sample:
            node.restart_plugin(timeout_s=timeout_s)
        self._start_publishers()
        self.wait_published(layout, timeout_s=timeout_s)
        self.publish_s = time.monotonic() - started
        return self.publish_s

    def pools(self) -> dict[str, list[tuple[int, int, int]]]:
        return list_pools(self.api)

    def wait_published(self, layout: Layout, *, timeout_s: float) -> None:
        """Until every node's pool is complete and built with `layout`: as many slices and devices as the
        layout gives an 8 x H100 node, all of one generation."""
        shape = layout_shape(layout)
        deadline = time.monotonic() + timeout_s
        while True:
            for record in self.publishers:
                if not is_alive(record.pid):
                    raise WaitTimeoutError(f"{record.name} exited:\n{log_tail(Path(record.log))}")
            try:
                pools = self.pools()
            except (ApiException, TransportError) as e:  # a busy API server may cut a long list
                log.warning("scale.list_retry", error=str(e))
                time.sleep(2.0)
                continue
            done = sum(1 for name in self.names if pool_shape(pools.get(name, [])) == shape)
            if done == len(self.names):
                return
            if time.monotonic() > deadline:
                raise WaitTimeoutError(
                    f"{done}/{len(self.names)} nodes published layout {layout.name} within {timeout_s}s"
                )
            time.sleep(2.0)

    def stop(self) -> None:
        self._stop_publishers()
        for node in self.sample:
            node.stop(delete_node_object=False)
        self.plane.stop()


def _create_nodes(api: k8s.ApiClient, names: list[str]) -> None:
    with ThreadPoolExecutor(max_workers=8) as pool:
        list(pool.map(lambda n: create_node(api, name=n, labels={LABEL: "true"}), names))


@contextlib.contextmanager
def scale_cluster(
    *, root: Path, binaries: Binaries, nodes: int, sample: int, layout: Layout
) -> Iterator[ScaleCluster]:
    """A control plane with production client rates and `nodes` nodes, `sample` of them with a kubelet."""
    plane = start_control_plane(state_dir=root / "controlplane", binaries=binaries, client_rates=PRODUCTION)
    names = [node_name(k) for k in range(nodes)]
    cluster: ScaleCluster | None = None
    try:
        api = plane.api_client()
        api.configuration.connection_pool_maxsize = 32
        bed = make_testbed(plane, api)
        cluster = ScaleCluster(plane=plane, api=api, bed=bed, root=root, names=names)
        cluster.settings_file.write_text(yaml.safe_dump(layout.document()), encoding="utf-8")
        for name in names[:sample]:
            node_file = root / f"{name}.yaml"
            node_file.write_text(
                yaml.safe_dump({**yaml.safe_load(H100_NODE.read_text(encoding="utf-8")), "nodeName": name}),
                encoding="utf-8",
            )
            cluster.sample.append(
                start_node(
                    bed,
                    node_file,
                    root=root / "n" / name,
                    labels={LABEL: "true"},
                    settings_file=cluster.settings_file,
                )
            )
        _create_nodes(api, names[sample:])
        started = time.monotonic()
        cluster._start_publishers()
        cluster.wait_published(layout, timeout_s=600)
        cluster.publish_s = time.monotonic() - started
        yield cluster
    finally:
        if cluster is not None:
            cluster.stop()
        else:
            plane.stop()
