"""Volcano as the scheduler of the real node: pods with `schedulerName: volcano` and whole-GPU, MIG, vgpu and
MPS claims are bound by vc-scheduler (its `Scheduled` event, none from kube-scheduler, which runs beside it),
their claims allocated by it on the real node's pool, prepared by the helm-installed plugin, and the
containers run with the device and the limits the claims asked for.

The configuration is the one docs/volcano.md gives a real cluster under Volcano main, whose allocator is
v1.36.1's: the chart's `schedulerVersion: v1.36.1`, so that vgpu and MPS are offered only by a node group of
their own. The real node is one node, so it plays the groups in turn (`helm upgrade` of its group's
families): every family asked for, of which the node withholds vgpu and MPS (a `SharingUnenforced` Warning)
and Volcano places a whole GPU and a MIG instance; then [vgpu]; then [mps]. Volcano (e2e/volcano, the
configuration of the Volcano scenarios) runs for this module only and the chart is set back after it."""

from __future__ import annotations

import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from dra_driver.core.families.mps import PINNED_MEMORY_ENV, THREAD_PERCENTAGE_ENV
from dra_driver.vocabulary.names import DRIVER_NAME, Attr, qualified
from e2e.harness.kube import Json, wait_for
from e2e.harness.node import driver_slices
from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.harness.testbed import SimCluster
from e2e.realnode.chart import CHART, RELEASE
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, mig, mps, probe_pod, vgpu, whole_gpu
from e2e.volcano.config import SCHEDULER_NAME
from e2e.volcano.launcher import Volcano
from e2e.volcano.pytest_fixture import start_volcano
from e2e.volcano.workloads import volcano_pod
from kubelet_plugin.node.events import EVENT_NAMESPACE, SHARING_UNENFORCED_REASON

from .helpers import (
    MIB,
    apply,
    claim_of,
    delete_pod,
    device_nodes,
    gpu_index,
    limited_gpu,
    report,
    results,
    running,
)

# Alone, the module pays for the real node's start too (4 min at load 10 on the 2-core workplace).
pytestmark = [pytest.mark.e2e, pytest.mark.realnode, pytest.mark.timeout(600)]

# The release whose DRA allocator Volcano main (ed72c7c) vendors: `k8s.io/kubernetes` v1.36.1 in its go.mod.
VOLCANO_ALLOCATOR = "v1.36.1"
EVERY_FAMILY = ["gpu", "vgpu", "mps", "mig"]
VGPU_MIB, VGPU_CORES = 3000, "30"
MPS_MIB, MPS_CORES = 2000, "40"


@pytest.fixture(scope="module")
def volcano(real_node: RealNode) -> Iterator[Volcano]:
    """vc-scheduler and vc-controller-manager on the real node's plane, for this module only."""
    started = start_volcano(real_node.plane)
    try:
        yield started
    finally:
        started.stop()


def published_types(node: RealNode) -> set[str]:
    return {
        str(next(iter(d["attributes"][qualified(Attr.TYPE)].values())))
        for s in driver_slices(node.api, node.name)
        for d in s["spec"].get("devices") or []
    }


def configure(
    node: RealNode, tmp: Path, *, scheduler_version: str, families: list[str], offered: set[str]
) -> None:
    """One `helm upgrade` of the release (schedulerVersion and the node group's families), until the new
    plugin pod has replaced the old one and the node publishes the device types `offered`."""
    chart = node.chart
    old = chart.current
    (group,) = chart.values(metrics_port=node.metrics_port)["nodeGroups"]
    path = tmp / f"volcano-{'-'.join(families)}-{scheduler_version or 'api'}.yaml"
    path.write_text(
        yaml.safe_dump(
            {"schedulerVersion": scheduler_version, "nodeGroups": [{**group, "families": families}]}
        )
    )
    chart.helm("upgrade", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--reuse-values", "-f", str(path))
    # as e2e.realnode.upgrade.roll waits: the new pod Ready beside the old one, then the old one gone
    wait_for(
        "the new plugin pod to be Ready",
        lambda: any(p.uid != old.uid and p.ready for p in chart.pods()),
        timeout_s=180,
        interval_s=0.2,
    )
    wait_for(
        "the old plugin pod to go",
        lambda: all(p.uid != old.uid for p in chart.pods()),
        timeout_s=120,
        interval_s=0.2,
    )
    chart.wait_ready()
    wait_for(
        f"{node.name} to publish {sorted(offered)}", lambda: published_types(node) == offered, timeout_s=60
    )


@pytest.fixture(scope="module")
def chart_back(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """A folder for values files; after the module, the release as installed (every family, no
    schedulerVersion)."""
    tmp = tmp_path_factory.mktemp("volcano-values")
    try:
        yield tmp
    finally:
        configure(real_node, tmp, scheduler_version="", families=EVERY_FAMILY, offered=set(EVERY_FAMILY))


def placed_by_volcano(node: RealNode, ns: str, name: str) -> Json:
    started = time.monotonic()
    pod = running(node, ns, name, timeout_s=120)
    print(f"{name}: placed by Volcano and running in {time.monotonic() - started:.1f}s")
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert pod["spec"]["nodeName"] == node.name
    events = k8s.CoreV1Api(node.api).list_namespaced_event(ns, field_selector=f"involvedObject.name={name}")
    scheduled = {
        e.reporting_component or (e.source.component if e.source else "") or ""
        for e in events.items
        if e.reason == "Scheduled"
    }
    assert scheduled == {SCHEDULER_NAME}, scheduled
    return pod


def on_real_node(node: RealNode, ns: str, pod: Json, entry: str) -> Json:
    (result,) = results(node, ns, pod, entry)
    assert result["driver"] == DRIVER_NAME and result["pool"] == node.name, result
    return result


def volcano_probe(node: RealNode, name: str, template: str, args: tuple[str, ...]) -> Json:
    pod = probe_pod(
        name,
        node=node.name,
        templates={"gpu": template},
        containers=[ProbeContainer("cuda", args, claims=("gpu",))],
    )
    return volcano_pod(pod, name=name)


def test_every_family_placed_by_volcano_on_the_real_node(
    bed: SimCluster, real_node: RealNode, volcano: Volcano, chart_back: Path, real_ns: str
) -> None:
    assert volcano.scheduler_binary == volcano.binaries.scheduler  # Volcano main as shipped
    # 1. Every family asked for: the node, told Volcano's allocator, withholds vgpu and MPS and says why.
    configure(
        real_node,
        chart_back,
        scheduler_version=VOLCANO_ALLOCATOR,
        families=EVERY_FAMILY,
        offered={"gpu", "mig"},
    )
    warnings = k8s.CoreV1Api(real_node.api).list_namespaced_event(
        EVENT_NAMESPACE,
        field_selector=f"involvedObject.name={real_node.name},reason={SHARING_UNENFORCED_REASON}",
    )
    assert any(f"the allocator of {VOLCANO_ALLOCATOR}" in (w.message or "") for w in warnings.items), [
        w.message for w in warnings.items
    ]
    apply(
        bed,
        real_ns,
        [
            claim_template("whole", whole_gpu()),
            claim_template("small", mig("1g.10gb")),
            volcano_probe(real_node, "whole", "whole", ("fill",)),
            volcano_probe(real_node, "mig", "small", ("report",)),
        ],
    )
    whole = placed_by_volcano(real_node, real_ns, "whole")
    index = gpu_index(on_real_node(real_node, real_ns, whole, "gpu")["device"])
    got = report(real_node, whole, "cuda")
    nodes = device_nodes(got)
    assert nodes[f"/dev/nvidia{index}"] == (195, index) and f"/dev/nvidia{1 - index}" not in nodes
    assert "LD_PRELOAD" not in got["env"] and all(not g["limited"] for g in got["gpus"])

    placed = placed_by_volcano(real_node, real_ns, "mig")
    device = on_real_node(real_node, real_ns, placed, "gpu")["device"]
    parent = gpu_index(device)
    assert device.startswith(f"gpu-{parent}-mig-1g10gb-") and parent != index
    (status,) = claim_of(real_node, real_ns, placed, "gpu")["status"]["devices"]
    mig_uuid = status["data"]["migUUID"]
    got = report(real_node, placed, "cuda")
    assert [m for _gpu, m in real_node.mig_instances()] == [mig_uuid]
    assert got["env"]["CUDA_VISIBLE_DEVICES"] == mig_uuid
    gi, ci = real_node.mig_cap_minors()[mig_uuid]
    caps = {p for p in device_nodes(got) if p.startswith("/dev/nvidia-caps/")}
    assert caps == {f"/dev/nvidia-caps/nvidia-cap{gi}", f"/dev/nvidia-caps/nvidia-cap{ci}"}
    delete_pod(real_node, real_ns, "whole")
    delete_pod(real_node, real_ns, "mig")

    # 2. A group of vgpu alone: a slice with its memory and SM limits in the container.
    configure(real_node, chart_back, scheduler_version=VOLCANO_ALLOCATOR, families=["vgpu"], offered={"vgpu"})
    apply(
        bed,
        real_ns,
        [
            claim_template("slice", vgpu(f"{VGPU_MIB}Mi", VGPU_CORES)),
            volcano_probe(real_node, "slice", "slice", ("fill",)),
        ],
    )
    placed = placed_by_volcano(real_node, real_ns, "slice")
    result = on_real_node(real_node, real_ns, placed, "gpu")
    assert result["device"].endswith("-vgpu") and result["consumedCapacity"]["memory"] == f"{VGPU_MIB}Mi"
    got = report(real_node, placed, "cuda")
    assert got["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{VGPU_MIB}m"
    assert got["env"]["CUDA_DEVICE_SM_LIMIT_0"] == VGPU_CORES
    gpu = limited_gpu(got)
    # the limit is the device's total, and allocations stop there
    assert gpu["total"] == VGPU_MIB * MIB and gpu["allocated"] == gpu["freeBefore"] < VGPU_MIB * MIB
    delete_pod(real_node, real_ns, "slice")

    # 3. A group of MPS alone: an MPS client with its share of the SMs and its pinned memory.
    configure(real_node, chart_back, scheduler_version=VOLCANO_ALLOCATOR, families=["mps"], offered={"mps"})
    apply(
        bed,
        real_ns,
        [
            claim_template("client", mps(f"{MPS_MIB}Mi", MPS_CORES)),
            volcano_probe(real_node, "client", "client", ("hold", "100")),
        ],
    )
    placed = placed_by_volcano(real_node, real_ns, "client")
    assert on_real_node(real_node, real_ns, placed, "gpu")["device"].endswith("-mps")
    got = report(real_node, placed, "cuda")
    assert got["cuInit"] == 0 and got["gpus"][0]["allocated"] == 100 * MIB
    env = got["env"]
    assert (env[THREAD_PERCENTAGE_ENV], env[PINNED_MEMORY_ENV]) == (MPS_CORES, f"0={MPS_MIB}M")
    delete_pod(real_node, real_ns, "client")
