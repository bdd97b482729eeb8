"""The fragmentation-aware extender (scheduler_extender) called by a real kube-scheduler: it steers a share
onto the GPU another share half fills, where kube-scheduler's own scores would spread it to an empty node;
and with the extender down, pods still schedule (`ignorable: true`).

Its own control plane (the trace bench's `trace_cluster`, with the recommended configuration and the
extender beside it), three simulated nodes: a and b with two T4s each, c with one. A whole GPU is held on c
and half of a's GPU 0 by a share (both pinned), so the mix of requests has whole GPUs in it: a second half
share on b would leave an untouched GPU half used that a whole GPU could no longer take; on a it fills the
GPU up. The pinned share also asks for most of a's CPUs, so LeastAllocated, without the extender, prefers b.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from kubernetes import client as k8s

from e2e.benches.trace.cluster import trace_cluster
from e2e.benches.trace.extender import extender_stats
from e2e.benches.trace.records import TracePod, parse_nodes
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.flags import load_scheduler_configuration
from e2e.controlplane.processes import stop_record
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.scenarios.own_plane.extender_pods import NAMESPACE, NODES, node_of, run_pod

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[3]


@pytest.mark.timeout(420)
def test_the_extender_steers_a_share_to_fill_a_gpu_and_scheduling_goes_on_without_it(tmp_path: Path) -> None:
    nodes_file = tmp_path / "nodes.csv"
    nodes_file.write_text(NODES, encoding="utf-8")
    nodes = parse_nodes(NODES, what=str(nodes_file))
    configuration = load_scheduler_configuration(REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml")
    with trace_cluster(
        root=tmp_path / "cluster",
        binaries=ensure_built(allow_build=False),
        nodes=nodes,
        nodes_file=nodes_file,
        scheduler_configuration=configuration,
        extender=True,
    ) as cluster:
        assert cluster.extender is not None and cluster.extender_port is not None
        k8s.CoreV1Api(cluster.api).create_namespace(
            k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE))
        )
        wait_for_service_account(cluster.api, NAMESPACE)
        half = TracePod(name="half", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=500)
        whole = TracePod(name="whole", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000)
        busy = TracePod(name="busy", cpu_milli=12000, memory_mib=1024, num_gpu=1, gpu_milli=500)
        run_pod(cluster, "whole", whole, node="ext-c")
        run_pod(cluster, "first-half", busy, node="ext-a")
        assert node_of(cluster, "whole") == "ext-c" and node_of(cluster, "first-half") == "ext-a"
        time.sleep(2)  # the extender's watch sees both allocations

        run_pod(cluster, "second-half", half)
        assert node_of(cluster, "second-half") == "ext-a"  # on b, a whole GPU would be broken
        assert extender_stats(cluster.extender_port).get("prioritized", 0) >= 1

        stop_record(cluster.extender, grace_s=5.0)
        cluster.extender = None
        run_pod(cluster, "third-half", half)
        assert node_of(cluster, "third-half") in {"ext-a", "ext-b"}  # scheduled on, the extender ignored
