"""`tessera plugin` and `tessera cleanup` set a node up in one place: the same options give both the same
GPUs, paths and preparer; only the daemon watches health events and times MIG operations."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest

from dra_driver.backends import open_backend
from dra_driver.backends.base import GpuBackend
from kubelet_plugin.claims.node_state import NodeInputs, NodeState
from kubelet_plugin.observability.timed_backend import TimedBackend
from kubelet_plugin.removal.cleanup_node import offline_access
from kubelet_plugin.removal.removal_record import RecordedState
from kubelet_plugin.serving import node_setup
from kubelet_plugin.serving.node_setup import set_up_node
from kubelet_plugin.serving.options import DaemonOptions

NODE_FILE = Path(__file__).resolve().parents[4] / "e2e" / "nodes" / "h100x8.yaml"


def options(root: Path) -> DaemonOptions:
    return DaemonOptions(
        node_name="node-a",
        root=root,
        simulate=NODE_FILE,
        sim_state=root / "sim-state.json",
        driver_library_dirs=(Path("/usr/lib/nvidia"),),
        host_options=(("mps_control", "/bin/true"),),
    )


def test_the_daemon_and_cleanup_set_the_node_up_alike(tmp_path: Path) -> None:
    o = options(tmp_path)
    daemon = set_up_node(o, access=offline_access(o), state_type=NodeState, serving=True)
    cleanup = set_up_node(o, access=offline_access(o), state_type=RecordedState)
    try:
        assert type(daemon.state) is NodeState and type(cleanup.state) is RecordedState
        for setup in (daemon, cleanup):
            assert setup.preparer.state is setup.state and setup.state.backend is setup.backend
            assert setup.state.paths == o.paths() and setup.preparer.pool_name == "node-a"
            assert setup.backend.inventory() == cleanup.backend.inventory()  # the same GPUs
        assert isinstance(daemon.backend, TimedBackend) and not isinstance(cleanup.backend, TimedBackend)
    finally:
        daemon.close()
        cleanup.close()


class Refused(NodeState):
    def __init__(self, inputs: NodeInputs) -> None:
        raise OSError("no plugin directory")


def test_the_backend_is_closed_when_the_state_cannot_be_built(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    opened: list[GpuBackend] = []
    closed: list[GpuBackend] = []

    def recording(**kwargs: Any) -> GpuBackend:
        backend = open_backend(**kwargs)
        real_close = backend.close

        def close() -> None:
            closed.append(backend)
            real_close()

        backend.close = close  # type: ignore[method-assign]
        opened.append(backend)
        return backend

    monkeypatch.setattr(node_setup, "open_backend", recording)
    o = options(tmp_path)
    with pytest.raises(OSError, match="no plugin directory"):
        set_up_node(o, access=offline_access(o), state_type=Refused)
    assert len(opened) == 1 and closed == opened
