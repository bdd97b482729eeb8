"""Pytest fixtures for e2e tests: import them into a conftest.py
(`from e2e.controlplane.pytest_fixture import control_plane, k8s_api, e2e_namespace, node_factory`)."""

from __future__ import annotations

import os
import time
import uuid
from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import pytest
import structlog
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.launcher import ControlPlane, start_control_plane
from e2e.controlplane.nodes import create_node, delete_node
from e2e.controlplane.releases import Release
from e2e.controlplane.settings import GATE_PROFILE, RELEASE

log = structlog.get_logger(__name__)

NodeFactory = Callable[..., Any]


@contextmanager
def private_control_plane(
    state_dir: Path,
    *,
    feature_gates: Mapping[str, bool] | None = None,
    release: Release = RELEASE,
    gate_profile: str = GATE_PROFILE,
) -> Iterator[ControlPlane]:
    """A control plane of `release` for a test or module (builds only with TESSERA_E2E_BUILD=1), stopped on
    exit; its gates are `gate_profile`'s (the session's by default) with `feature_gates` over them."""
    try:
        binaries = ensure_built(
            allow_build=os.environ.get("TESSERA_E2E_BUILD") == "1", version=release.version
        )
        plane = start_control_plane(
            state_dir=state_dir,
            binaries=binaries,
            feature_gates=feature_gates,
            release=release,
            gate_profile=gate_profile,
        )
    except ControlPlaneError as e:
        pytest.fail(str(e), pytrace=False)
    try:
        yield plane
    finally:
        plane.stop()


def skip_unmixable(items: list[pytest.Item]) -> None:
    """Skips the tests marked `mixes_families` where the session's release cannot keep a shared family apart
    from the others, because Tessera then publishes no such node (`dra_driver.core.cluster_features`); the
    legacy-release tests show what it publishes instead."""
    if RELEASE.mixes_families():
        return
    reason = (
        f"Kubernetes {RELEASE.version}: kube-scheduler ignores counters held by shared devices "
        "(kubernetes/kubernetes#139040), so Tessera publishes vgpu and MPS only on single-family nodes"
    )
    for item in items:
        if item.get_closest_marker("mixes_families") is not None:
            item.add_marker(pytest.mark.skip(reason=reason))


# Package scope: one plane for the tests below the conftest.py that imports these fixtures, stopped once the
# last of them ran, so that it does not run idle beside the rest of the suite (tests/README.md, "Running in
# parallel").
@pytest.fixture(scope="package")
def control_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """One control plane for the tests of a package; its logs stay in the session's tmp dir
    (`<state>/logs`)."""
    with private_control_plane(tmp_path_factory.mktemp("controlplane")) as plane:
        yield plane


@pytest.fixture(scope="package")
def k8s_api(control_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    """An admin (system:masters) API client."""
    with control_plane.api_client() as api:
        yield api


def wait_for_service_account(api: k8s.ApiClient, namespace: str, *, timeout_s: float = 60.0) -> None:
    core = k8s.CoreV1Api(api)
    deadline = time.monotonic() + timeout_s
    while True:
        try:
            core.read_namespaced_service_account("default", namespace)
            return
        except ApiException as e:
            if e.status != 404:
                raise
        if time.monotonic() > deadline:
            raise ControlPlaneError(f"no default service account in {namespace!r} after {timeout_s}s")
        time.sleep(0.2)


@pytest.fixture
def e2e_namespace(k8s_api: k8s.ApiClient) -> Iterator[str]:
    """A fresh namespace whose default service account exists, so pods are admitted at once."""
    name = f"e2e-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(k8s_api)
    core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": name}}))
    wait_for_service_account(k8s_api, name)
    try:
        yield name
    finally:
        core.delete_namespace(name)


@pytest.fixture
def node_factory(k8s_api: k8s.ApiClient) -> Iterator[NodeFactory]:
    """`node_factory(name, labels={...})` creates a Ready, untainted Node; all are deleted after the test."""
    created: list[str] = []

    def make(name: str, labels: dict[str, str] | None = None, **resources: str) -> Any:
        node = create_node(k8s_api, name=name, labels=labels, **resources)
        created.append(name)
        return node

    try:
        yield make
    finally:
        for name in created:
            delete_node(k8s_api, name=name)
