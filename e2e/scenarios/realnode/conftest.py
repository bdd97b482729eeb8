"""The real node (kubelet + containerd + runc + Tessera's plugin, e2e.realnode) for the real-node scenarios,
joined to the scenarios' control plane next to the stand-in nodes; every scenario gets a fresh namespace,
emptied afterwards, and the node is checked for leftovers (CDI specs, claim dirs, MIG instances, either
checkpoint)."""

from __future__ import annotations

import os
import shutil
import uuid
from collections.abc import Iterator

import pytest
from kubernetes import client as k8s

from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.harness.kube import WaitTimeoutError, delete_namespace_contents, wait_for
from e2e.harness.node import NODES_DIR
from e2e.harness.testbed import SimCluster
from e2e.realnode.binaries import check_built
from e2e.realnode.errors import RealNodeError
from e2e.realnode.node import RealNode, short_root

REAL_NODE_FILE = NODES_DIR / "realnode-h100x2.yaml"


# package scope: the node (kubelet, containerd, the chart's pods) stops after the last real-node scenario
@pytest.fixture(scope="package")
def real_node(bed: SimCluster, request: pytest.FixtureRequest) -> Iterator[RealNode]:
    if os.geteuid() != 0:
        pytest.skip("the real node needs root: namespaces, mounts, cgroups")
    try:
        binaries = check_built()
    except RealNodeError as e:
        pytest.skip(f"the real node is not built: {e}")
    root = short_root()
    node = RealNode(plane=bed.plane, api=bed.api, binaries=binaries, node_file=REAL_NODE_FILE, root=root)
    try:
        node.start()
    except BaseException:
        node.stop()
        raise  # the root stays, for the logs
    try:
        yield node
    finally:
        node.stop()
        # Kept on failure for the logs (<root>/logs, <root>/var/log/pods); removed when every test passed.
        if not getattr(request.session, "testsfailed", 0):
            shutil.rmtree(root, ignore_errors=True)


@pytest.fixture
def real_ns(real_node: RealNode) -> Iterator[str]:
    name = f"real-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(real_node.api)
    core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": name}}))
    wait_for_service_account(real_node.api, name)
    try:
        yield name
    finally:
        delete_namespace_contents(real_node.api, name, timeout_s=120)
        core.delete_namespace(name)
        # The kubelet unprepares before it finalizes a pod, so nothing may remain once the pods are gone.
        try:
            wait_for("the real node to be clean", lambda: not real_node.leftovers(), timeout_s=30)
        except WaitTimeoutError:
            pytest.fail(f"scenario left behind on {real_node.name}: {real_node.leftovers()}")
