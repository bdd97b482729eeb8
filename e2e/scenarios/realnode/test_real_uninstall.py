"""`helm uninstall` on the real node, then the chart's cleanup mode (docs/install.md, "Uninstalling"):

install → a MIG and an MPS pod run (one GPU each: the node has two, and every family holds a GPU's counters
alone) → `helm uninstall tessera` (the plugin goes; the pods keep running,
untouched) → the pods are deleted (they wait in Terminating: the kubelet must unprepare their claims and no
plugin answers) → `helm install tessera-cleanup --set cleanup.enabled=true` (its pod serves the kubelet's
unprepare calls, then removes what Tessera left and turns Ready) → the pods are gone and nothing of Tessera is
left on the node: no CDI spec, claim or GPU-view directory, library, MPS daemon or directory, MIG instance,
checkpoint, socket, or claim in the kubelet's checkpoint. Afterwards the chart is installed again for the
scenarios that follow.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import structlog
from kubernetes import client as k8s

from dra_driver.core.families import mps as mps_family
from e2e.harness.kube import get_pod, is_running, wait_for
from e2e.harness.testbed import SimCluster
from e2e.realnode.chart import CLEANUP_LABELS, CLEANUP_RELEASE
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, mig, mps, probe_pod
from kubelet_plugin.node.paths import PluginPaths

from .helpers import apply, report, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
log = structlog.get_logger(__name__)

PODS = {"instance": "mig", "client": "mps"}


def tessera_files(root: Path) -> list[str]:
    """Everything of Tessera's below the node's host paths, as the node shows it."""
    paths = PluginPaths.under(root)
    found = [str(p) for p in paths.cdi_dir.glob("k8s.gpu.tessera.dev*")]
    for d in (paths.claims_dir, paths.gpus_dir, paths.family_dir(mps_family.NAME), paths.plugin_dir):
        if d.exists():
            found += [str(p) for p in d.iterdir()]
    if paths.library_path.exists():
        found.append(str(paths.library_path))
    found += [str(p) for p in paths.registry_dir.glob("gpu.tessera.dev*")]
    return sorted(found)


def test_uninstall_keeps_pods_running_and_cleanup_leaves_nothing(
    bed: SimCluster, real_node: RealNode, real_ns: str
) -> None:
    apply(
        bed,
        real_ns,
        [claim_template("mig", mig("1g.10gb")), claim_template("mps", mps("1000Mi", "30"))],
    )
    for name, template in PODS.items():
        apply(
            bed,
            real_ns,
            [
                probe_pod(
                    name,
                    node=real_node.name,
                    templates={"gpu": template},
                    containers=[ProbeContainer("cuda", ("hold", "100"), claims=("gpu",))],
                )
            ],
        )
    pods = {name: running(real_node, real_ns, name) for name in PODS}
    for pod in pods.values():
        assert report(real_node, pod, "cuda")["cuInit"] == 0
    containers = {n: p["status"]["containerStatuses"][0]["containerID"] for n, p in pods.items()}
    assert real_node.mig_instances() and real_node.cdi_specs()

    real_node.chart.uninstall()
    wait_for("the plugin's pod to go", lambda: not real_node.chart.pods(), timeout_s=60)
    for name in PODS:  # nothing of a running pod depends on the plugin
        now = get_pod(real_node.api, real_ns, name)
        assert now is not None and is_running(now)
        status = now["status"]["containerStatuses"][0]
        assert (status["containerID"], status["restartCount"]) == (containers[name], 0)

    core = k8s.CoreV1Api(real_node.api)
    for name in PODS:
        core.delete_namespaced_pod(name, real_ns)
    real_node.chart.install_cleanup(metrics_port=real_node.metrics_port)
    try:
        wait_for(
            "the deleted pods to be finalized once the cleanup serves their unprepare",
            lambda: all(get_pod(real_node.api, real_ns, n) is None for n in PODS),
            timeout_s=120,
        )
        cleanup = real_node.chart.wait_ready(labels=CLEANUP_LABELS, timeout_s=120)
        clean = cleanup.logged("node clean")
        assert clean, [e.get("event") for e in cleanup.events()]
        log.info("realnode.cleanup", **{k: v for k, v in clean[-1].items() if k not in ("event", "level")})
        assert real_node.leftovers() == []
        assert real_node.kubelet_prepared() == {}
        left = [f for f in tessera_files(real_node.root) if cleanup.uid not in f]
        assert left == [], left
    finally:
        real_node.chart.uninstall(CLEANUP_RELEASE)
        real_node.chart.install(metrics_port=real_node.metrics_port)
