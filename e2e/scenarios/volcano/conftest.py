"""Volcano's scenarios: a control plane of their own with Volcano beside kube-scheduler, and one simulated
8-GPU H100 node offering every family; each scenario gets a fresh namespace, emptied afterwards, and the node
is checked for leftovers."""

from __future__ import annotations

import shutil
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import control_plane, k8s_api, skip_unmixable
from e2e.harness.testbed import H100_NODE, SimCluster, make_testbed, scenario_namespace, start_node
from e2e.volcano.launcher import Volcano
from e2e.volcano.pytest_fixture import volcano

__all__ = ["control_plane", "k8s_api", "vbed", "vns", "volcano"]


@pytest.fixture(scope="package")
def vbed(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, volcano: Volcano, request: pytest.FixtureRequest
) -> Iterator[SimCluster]:
    testbed = make_testbed(control_plane, k8s_api)
    # A short root: the plugin's unix sockets live below it and their paths may not pass 107 bytes.
    root = Path(tempfile.mkdtemp(prefix="te-vc-", dir="/tmp"))
    try:
        start_node(testbed, H100_NODE, root=root / "h100")
        yield testbed
    finally:
        for node in list(testbed.nodes.values()):
            node.stop()
        if not getattr(request.session, "testsfailed", 0):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def vns(vbed: SimCluster) -> Iterator[str]:
    with scenario_namespace(vbed, prefix="vc", timeout_s=90) as name:
        yield name


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip_unmixable(items)
