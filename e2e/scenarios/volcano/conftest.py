"""Volcano's scenarios: a control plane of their own with Volcano beside kube-scheduler, and one simulated
8-GPU H100 node offering every family; each scenario gets a fresh namespace, emptied afterwards, and the node
is checked for leftovers."""

from __future__ import annotations

import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import control_plane, k8s_api, skip_unmixable, wait_for_service_account
from e2e.harness.kube import WaitTimeoutError, delete_namespace_contents, wait_for
from e2e.harness.testbed import H100_NODE, SimCluster, make_testbed, start_node
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


def leftovers(testbed: SimCluster) -> list[str]:
    found: list[str] = []
    for node in testbed.nodes.values():
        found += [f"{node.name}: CDI spec {p.name}" for p in node.cdi_specs()]
        found += [f"{node.name}: claim dir {p.name}" for p in node.claim_dirs()]
        found += [f"{node.name}: MIG instance {mig} on {gpu}" for gpu, mig in node.mig_instances()]
        found += [f"{node.name}: pod record {p.name}" for p in node.runtime_dir.glob("*.json")]
    return found


@pytest.fixture
def vns(vbed: SimCluster) -> Iterator[str]:
    name = f"vc-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(vbed.api)
    core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": name}}))
    wait_for_service_account(vbed.api, name)
    try:
        yield name
    finally:
        delete_namespace_contents(vbed.api, name, timeout_s=90)
        core.delete_namespace(name)
        try:
            wait_for("the nodes to be clean", lambda: not leftovers(vbed), timeout_s=15)
        except WaitTimeoutError:
            pytest.fail(f"scenario left behind: {leftovers(vbed)}")


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip_unmixable(items)
