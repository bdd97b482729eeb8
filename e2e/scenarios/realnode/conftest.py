"""The real node (kubelet + containerd + runc + Tessera's plugin, e2e.realnode) for the real-node scenarios,
on a control plane of their own (package scope: `make test` runs this folder on one pytest-xdist worker while
another runs the simulated-node scenarios; the root conftest.py); every scenario gets a fresh namespace,
emptied afterwards, and the node is checked for leftovers (CDI specs, claim dirs, MIG instances, either
checkpoint)."""

from __future__ import annotations

import os
import shutil
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import structlog
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import control_plane, k8s_api
from e2e.harness.kube import wait_for
from e2e.harness.monitoring import apiserver_job, chart_monitoring, service_monitor_job, with_for
from e2e.harness.node import NODES_DIR
from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.harness.prometheus import PrometheusNotBuiltError, PrometheusServer, running_prometheus
from e2e.harness.testbed import SimCluster, make_testbed, scenario_namespace
from e2e.realnode.binaries import check_built
from e2e.realnode.errors import RealNodeError
from e2e.realnode.node import RealNode, short_root

__all__ = ["bed", "control_plane", "k8s_api", "real_node", "real_ns"]

log = structlog.get_logger(__name__)

REAL_NODE_FILE = NODES_DIR / "realnode-h100x2.yaml"
PROMETHEUS_INTERVAL_S = 1.0  # scrape and rule evaluation
# The fixture's copy of the chart's rules only: a lost GPU pages after 1m in the chart; 3s here still shows
# the alert going pending → firing within a scenario.
PROMETHEUS_FOR = {"TesseraGpuLost": "3s"}


# The plane's DeviceClasses and the plugin's identity, without simulated nodes: the real node is the only one.
# (e2e/scenarios/conftest.py parametrizes `bed` with a backend, which means nothing here.)
@pytest.fixture(scope="package")
def bed(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> SimCluster:
    return make_testbed(control_plane, k8s_api)


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
def real_ns(bed: SimCluster, real_node: RealNode) -> Iterator[str]:
    # Every scenario starts from one plugin pod: an upgrade of the one before may still be rolling.
    real_node.chart.wait_settled()
    # The kubelet unprepares before it finalizes a pod, so nothing may remain once the pods are gone.
    with scenario_namespace(bed, prefix="real", timeout_s=120, left=real_node.leftovers, clean_s=30) as name:
        yield name


@pytest.fixture
def prometheus(real_node: RealNode, tmp_path: Path) -> Iterator[PrometheusServer]:
    """A real Prometheus (e2e/prometheus/build.sh) scraping the helm-installed plugin (and the admission
    webhook, while it is on) through the jobs prometheus-operator makes of the chart's ServiceMonitors, and
    the API server, every second, with the
    chart's PrometheusRule loaded (PROMETHEUS_FOR shortened); skipped where the server is not built."""
    started = time.monotonic()
    try:
        monitors, groups = chart_monitoring(SYSTEM_NS)
        plane = real_node.plane
        pki = plane.pki
        jobs = [
            *(job for m in monitors for job in service_monitor_job(m, kubeconfig=plane.kubeconfig)),
            apiserver_job(server=plane.server, ca=pki.ca.cert, cert=pki.admin.cert, key=pki.admin.key),
        ]
        with running_prometheus(
            tmp_path / "prometheus",
            scrape_configs=jobs,
            rule_groups=with_for(groups, PROMETHEUS_FOR),
            interval_s=PROMETHEUS_INTERVAL_S,
        ) as server:
            wait_for(
                "Prometheus to scrape the plugin and the API server",
                lambda: server.healthy_targets("tessera-node-plugin") and server.healthy_targets("apiserver"),
                timeout_s=30,
            )
            log.info("prometheus.scraping", seconds=round(time.monotonic() - started, 1), url=server.url)
            yield server
    except PrometheusNotBuiltError as e:
        pytest.skip(str(e))
