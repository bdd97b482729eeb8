"""Where Volcano (`binpack` and `nodeorder` of the DRA guide's configuration) puts vgpu pods across nodes
(issue #31; volcano-sh/volcano#5713), against kube-scheduler 1.37 for the same pods. Four published 2-GPU
H100 nodes (no daemon: placement only): on the first a pod that requests no CPU holds a vgpu share (the node a
GPU bin-packer would fill next), on the last a pod holds 100m of CPU and no device. Eight vgpu pods (4Gi, 10
cores, 10m CPU) placed one by one: both schedulers put every one on the last node's gpu-0-vgpu, none beside
the share: neither counts DRA devices when it picks a node, both follow the CPU and memory already requested
(Volcano's binpack; BalancedAllocation in both, which scores a node with no requests one point lower). See
docs/volcano.md, "Binpack"."""

from __future__ import annotations

import copy
import time
import uuid
from collections.abc import Iterator
from contextlib import ExitStack
from dataclasses import dataclass
from functools import partial

import pytest
from kubernetes import client as k8s

from dra_driver.vocabulary.names import Cap
from e2e.harness.kube import Json, get_pod, list_claims, list_pods, wait_for
from e2e.harness.node import NODES_DIR
from e2e.harness.published_node import published_node
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import apply
from e2e.volcano.config import binpack_conf, scheduler_conf
from e2e.volcano.gangs import bound_result
from e2e.volcano.launcher import Volcano
from e2e.volcano.workloads import claim_template, pod_with_template, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(240)]

# 2 GPUs a node, not 8: where a pod lands does not depend on how many GPUs a node has, and publishing four
# 8-GPU nodes (every MIG profile of each GPU) was most of the module's time
NODE_FILE = NODES_DIR / "realnode-h100x2.yaml"
NODES = 4
PODS = 8
WEIGHED_PODS = 4
POOL_LABEL = "e2e.tessera.dev/pack"
SLICE = {Cap.MEMORY: "4Gi", Cap.CORES: "10"}


@dataclass(frozen=True, slots=True)
class Pool:
    tag: str  # the value of POOL_LABEL on its nodes
    nodes: tuple[str, ...]


@pytest.fixture(scope="module")
def pool(vbed: SimCluster) -> Iterator[Pool]:
    """Four nodes of the same inventory, labelled as one pool; their slices published, no daemon."""
    tag = f"t{uuid.uuid4().hex[:6]}"  # a letter first: YAML 1.2 reads a value like 1e5432 as a number
    nodes = tuple(f"pack-{tag}-{i}" for i in range(NODES))
    with ExitStack() as stack:
        for name in nodes:
            stack.enter_context(
                published_node(vbed.api, node_file=NODE_FILE, name=name, labels={POOL_LABEL: tag})
            )
        yield Pool(tag=tag, nodes=nodes)


@pytest.fixture
def pack_ns(vbed: SimCluster, vns: str) -> Iterator[str]:
    """`vns`, its pods deleted at once afterwards: no kubelet finalizes a pod on a published node."""
    try:
        yield vns
    finally:
        force_delete_pods(vbed, vns)


def force_delete_pods(bed: SimCluster, ns: str) -> None:
    core = k8s.CoreV1Api(bed.api)
    for pod in list_pods(bed.api, ns):
        core.delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
    wait_for(f"pods of {ns} gone", lambda: not list_pods(bed.api, ns), timeout_s=30)


def on_node(pod: Json, node: str) -> Json:
    out = copy.deepcopy(pod)
    out["spec"]["nodeSelector"] = {"kubernetes.io/hostname": node}
    return out


def in_pool(pod: Json, tag: str) -> Json:
    out = copy.deepcopy(pod)
    out["spec"]["nodeSelector"] = {POOL_LABEL: tag}
    out["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "10m"
    return out


def place_one_by_one(bed: SimCluster, ns: str, pods: list[Json]) -> list[tuple[str, str]]:
    """Each pod created once the one before is bound with its claim allocated: (node, device) of each."""
    placed = []
    for pod in pods:
        name: str = pod["metadata"]["name"]
        apply(bed, ns, [pod])
        result: Json = wait_for(f"{name} bound", partial(bound_result, bed, ns, name), timeout_s=60)
        placed.append((str(result["pool"]), str(result["device"])))
    return placed


def occupy(bed: SimCluster, ns: str, nodes: tuple[str, ...], *, holder_cpu: str | None) -> None:
    """The first node: a vgpu share whose pod requests `holder_cpu` (None: no CPU, no memory); the last: a pod
    with 100m of CPU and no device."""
    apply(bed, ns, [claim_template("slice", "vgpu.tessera.dev", capacity=SLICE)])
    holder = on_node(pod_with_template("holder", "slice"), nodes[0])
    if holder_cpu is None:
        del holder["spec"]["containers"][0]["resources"]["requests"]
    else:
        holder["spec"]["containers"][0]["resources"]["requests"]["cpu"] = holder_cpu
    ballast = on_node(pod_with_template("ballast", "slice"), nodes[-1])
    del ballast["spec"]["resourceClaims"], ballast["spec"]["containers"][0]["resources"]["claims"]
    apply(bed, ns, [holder, ballast])
    wait_for("the holder's share allocated", lambda: bound_result(bed, ns, "holder"), timeout_s=30)
    wait_for("the ballast bound", lambda: (get_pod(bed.api, ns, "ballast") or {})["spec"].get("nodeName"),
             timeout_s=30)  # fmt: skip


def by_volcano(bed: SimCluster, ns: str, pool: Pool, names: list[str]) -> list[tuple[str, str]]:
    pods = [volcano_pod(in_pool(pod_with_template(n, "slice"), pool.tag), name=n) for n in names]
    return place_one_by_one(bed, ns, pods)


def test_both_schedulers_place_vgpu_pods_by_cpu_not_by_devices(
    vbed: SimCluster, pack_ns: str, pool: Pool
) -> None:
    ns, tag, nodes = pack_ns, pool.tag, pool.nodes
    occupy(vbed, ns, nodes, holder_cpu=None)

    started = time.monotonic()
    by_vc = by_volcano(vbed, ns, pool, [f"vc-{i}" for i in range(PODS)])
    volcano_s = time.monotonic() - started
    k8s.CoreV1Api(vbed.api).delete_collection_namespaced_pod(
        ns, grace_period_seconds=0, label_selector=None, field_selector="spec.schedulerName=volcano"
    )
    wait_for("Volcano's claims gone", lambda: len(list_claims(vbed.api, ns)) == 1, timeout_s=60)

    started = time.monotonic()
    names = [f"kube-{i}" for i in range(PODS)]
    by_kube = place_one_by_one(vbed, ns, [in_pool(pod_with_template(n, "slice"), tag) for n in names])
    kube_s = time.monotonic() - started
    print(f"binpack: volcano {by_vc} in {volcano_s:.1f}s; kube-scheduler {by_kube} in {kube_s:.1f}s")

    # Both: every pod on the node with the CPU, on the GPU the allocator tries first; none beside the share.
    for placed in (by_vc, by_kube):
        assert placed == [(nodes[-1], "gpu-0-vgpu")] * PODS


def test_a_heavier_binpack_packs_beside_gpu_pods_that_request_cpu(
    vbed: SimCluster, pack_ns: str, pool: Pool, volcano: Volcano
) -> None:
    """GPU pods usually request CPU as well: here the share's pod requests 1 CPU. With the default weights
    Volcano still puts the pods on the last node, away from the share: least-requested spreading (an integer
    point per 1 % of a node's CPU) outweighs binpack's fraction of a point. With `binpack.weight: 10` they go
    beside the share, on its GPU: packing GPUs follows from packing the CPU their pods request."""
    ns, nodes = pack_ns, pool.nodes
    occupy(vbed, ns, nodes, holder_cpu="1")
    default = by_volcano(vbed, ns, pool, [f"default-{i}" for i in range(WEIGHED_PODS)])
    volcano.use_conf(binpack_conf(10))
    try:
        weighted = by_volcano(vbed, ns, pool, [f"weighted-{i}" for i in range(WEIGHED_PODS)])
    finally:
        volcano.use_conf(scheduler_conf())
    print(f"binpack: default weights {default}; binpack.weight 10 {weighted}")
    assert default == [(nodes[-1], "gpu-0-vgpu")] * WEIGHED_PODS
    share = bound_result(vbed, ns, "holder") or {}
    assert weighted == [(nodes[0], share["device"])] * WEIGHED_PODS
