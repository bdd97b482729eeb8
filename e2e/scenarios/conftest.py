"""One control plane and two simulated nodes (8 H100s; 2 A100s and 2 L4s) for the scenarios (package scope:
stopped after the last one); every scenario gets a fresh namespace, emptied afterwards, and the nodes are
checked for leftovers.

The node plugins run on the simulated backend; the scenarios of `ALSO_ON_NVML` run a second time with the
plugins on the NVML backend over the fake libnvidia-ml (the nodes are restarted once for them)."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import control_plane, k8s_api, skip_unmixable
from e2e.harness.node import BackendKind
from e2e.harness.testbed import (
    H100_NODE,
    MIXED_NODE,
    SimCluster,
    make_testbed,
    scenario_namespace,
    start_node,
)

__all__ = ["bed", "control_plane", "k8s_api", "ns"]

ALSO_ON_NVML = frozenset({"test_mig", "test_vgpu", "test_plugin_restart"})


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    """Every scenario names the backend its nodes run on; pytest groups them, so the nodes start twice."""
    if "bed" in metafunc.fixturenames:
        module = metafunc.module.__name__.rsplit(".", 1)[-1]
        kinds = list(BackendKind) if module in ALSO_ON_NVML else [BackendKind.SIMULATED]
        metafunc.parametrize("bed", [k.value for k in kinds], indirect=True, scope="package")


@pytest.fixture(scope="package")
def bed(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, request: pytest.FixtureRequest
) -> Iterator[SimCluster]:
    backend = BackendKind(request.param)
    testbed = make_testbed(control_plane, k8s_api)
    # A short root: the plugin's unix sockets live below it and their paths may not pass 107 bytes.
    root = Path(tempfile.mkdtemp(prefix=f"te-{backend.value[:3]}-", dir="/tmp"))
    try:
        start_node(testbed, H100_NODE, root=root / "h100", backend=backend)
        start_node(testbed, MIXED_NODE, root=root / "mixed", backend=backend)
        yield testbed
    finally:
        for node in list(testbed.nodes.values()):
            node.stop()
        # Kept on failure for the logs (<root>/<node>/logs); removed when every scenario passed.
        if not getattr(request.session, "testsfailed", 0):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def ns(bed: SimCluster) -> Iterator[str]:
    with scenario_namespace(bed, prefix="e2e") as name:
        yield name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip_unmixable(items)
