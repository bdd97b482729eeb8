"""The daemon's metrics collector built in the test's own process over a running daemon's files (its
checkpoint, claim directories and simulated GPUs' state): what a scrape of that daemon renders, without HTTP.
`tests/integration/test_metrics_endpoint.py` and `make bench-metrics` (e2e/benches/scrape.py) share it."""

from __future__ import annotations

from collections.abc import Callable, Mapping
from pathlib import Path

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.claims import claim_processes
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.observability.node_metrics import NodeMetrics, NodeSources
from kubelet_plugin.record.checkpoint_store import CheckpointStore

REPO = Path(__file__).resolve().parents[2]
# two H100s whose UUIDs the fake driver (interceptor/build/fake) reports
NODE_FILE = REPO / "e2e" / "nodes" / "realnode-h100x2.yaml"


def metrics_for(
    root: Path,
    paths: PluginPaths,
    *,
    proc: Path = claim_processes.PROC,
    pcie_busy: Callable[[], Mapping[GpuUUID, float]] = dict,
) -> NodeMetrics:
    """The daemon's collector over the daemon's files: the checkpoint, the claim dirs, the GPUs' state
    (`<root>/sim-state.json`, the daemon started with `--simulate NODE_FILE`); `pcie_busy`: a paging
    watch's busy shares."""
    backend = SimulatedBackend.from_file(node_file=NODE_FILE, state_file=root / "sim-state.json")
    inventory = backend.inventory()
    store = CheckpointStore(path=paths.checkpoint_file)

    def stamp() -> object:
        st = paths.checkpoint_file.stat()
        return (st.st_ino, st.st_mtime_ns, st.st_size)

    return NodeMetrics(
        NodeSources(
            inventory=lambda: inventory,
            checkpoint=lambda: store.load(boot_id=""),
            checkpoint_stamp=stamp,
            claims_dir=paths.claims_dir,
            health=lambda: None,
            conditions=dict,
            vgpu_shares=10,
            proc=proc,
            pcie_busy=pcie_busy,
        )
    )
