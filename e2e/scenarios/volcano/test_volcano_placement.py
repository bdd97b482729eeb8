"""Pods with `schedulerName: volcano` and Tessera claims: vc-scheduler (the predicates plugin's DRA path)
allocates the claim and binds the pod, the node's plugin prepares what it allocated, and kube-scheduler,
running beside it, never touches the pod."""

from __future__ import annotations

import time

import pytest

from dra_driver.core.families.mps import THREAD_PERCENTAGE_ENV
from dra_driver.libtessera.names import HamiEnv
from dra_driver.vocabulary.names import DRIVER_NAME, Attr, Cap
from e2e.harness.kube import Json, scheduled_by
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, attribute, consumed, container, results, running
from e2e.volcano.config import SCHEDULER_NAME
from e2e.volcano.workloads import claim_template, pod_with_template, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(240)]


def placed_by_volcano(bed: SimCluster, ns: str, name: str) -> Json:
    started = time.monotonic()
    pod = running(bed, ns, name, timeout_s=120)
    print(f"{name}: placed by Volcano and running in {time.monotonic() - started:.1f}s")
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert pod["spec"]["nodeName"] == H100
    assert scheduled_by(bed.api, ns, name) == {SCHEDULER_NAME}
    return pod


def test_whole_gpu_claim_placed_by_volcano(vbed: SimCluster, vns: str) -> None:
    apply(
        vbed,
        vns,
        [
            claim_template("whole", "gpu.tessera.dev"),
            volcano_pod(pod_with_template("whole", "whole"), name="whole"),
        ],
    )
    pod = placed_by_volcano(vbed, vns, "whole")
    (r,) = results(vbed, vns, pod, "gpu")
    assert r["driver"] == DRIVER_NAME and r["pool"] == H100
    assert attribute(vbed, H100, r["device"], Attr.TYPE) == "gpu"
    # Prepared on the node: the container holds exactly that GPU's device node.
    main = container(vbed, vns, pod, "main")
    gpus = {p for p in main.device_paths() if p.removeprefix("/dev/nvidia").isdigit()}
    assert gpus == {f"/dev/nvidia{r['device'].removeprefix('gpu-')}"}


def test_vgpu_claim_placed_by_volcano_gets_its_limits(vbed: SimCluster, vns: str) -> None:
    capacity = {Cap.MEMORY: "4Gi", Cap.CORES: "20"}
    apply(
        vbed,
        vns,
        [
            claim_template("slice", "vgpu.tessera.dev", capacity=capacity),
            volcano_pod(pod_with_template("slice", "slice"), name="slice"),
        ],
    )
    pod = placed_by_volcano(vbed, vns, "slice")
    (r,) = results(vbed, vns, pod, "gpu")
    assert attribute(vbed, H100, r["device"], Attr.TYPE) == "vgpu"
    assert consumed(r, Cap.MEMORY) == "4Gi" and consumed(r, Cap.CORES) == "20"
    assert r.get("shareID"), "a share of a multi-allocatable device carries a share ID"
    env = container(vbed, vns, pod, "main").env_map()
    assert env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == "4096m"
    assert env[f"{HamiEnv.SM_LIMIT_PREFIX}0"] == "20"


def test_volcano_and_kube_scheduler_share_a_gpu(vbed: SimCluster, vns: str) -> None:
    """A share kube-scheduler allocated and one Volcano allocated live on the same vgpu device when the
    claims ask for that GPU: each scheduler counts the other's capacity."""
    gpu = str(attribute(vbed, H100, "gpu-3", Attr.UUID))
    on_gpu = f'device.attributes["{DRIVER_NAME}"].{Attr.PARENT_UUID} == "{gpu}"'
    capacity = {Cap.MEMORY: "30Gi", Cap.CORES: "40"}
    apply(vbed, vns, [claim_template("half", "vgpu.tessera.dev", cel=on_gpu, capacity=capacity)])
    apply(vbed, vns, [pod_with_template("by-kube", "half")])
    (first,) = results(vbed, vns, running(vbed, vns, "by-kube"), "gpu")
    apply(vbed, vns, [volcano_pod(pod_with_template("by-volcano", "half"), name="by-volcano")])
    (second,) = results(vbed, vns, placed_by_volcano(vbed, vns, "by-volcano"), "gpu")
    assert first["device"] == second["device"] == "gpu-3-vgpu"
    assert first["shareID"] != second["shareID"]


def test_mig_claim_placed_by_volcano_gets_its_instance(vbed: SimCluster, vns: str) -> None:
    apply(
        vbed,
        vns,
        [
            claim_template("mig", "mig-1g.10gb.gpu.tessera.dev"),
            volcano_pod(pod_with_template("mig", "mig"), name="mig"),
        ],
    )
    pod = placed_by_volcano(vbed, vns, "mig")
    (r,) = results(vbed, vns, pod, "gpu")
    assert attribute(vbed, H100, r["device"], Attr.TYPE) == "mig"
    assert attribute(vbed, H100, r["device"], Attr.PROFILE) == "1g.10gb"
    # Prepared: the instance exists on the simulated GPU and the container holds its capability nodes.
    assert len(vbed.node(H100).mig_instances()) == 1
    caps = {p for p in container(vbed, vns, pod, "main").device_paths() if p.startswith("/dev/nvidia-caps/")}
    assert caps, "no MIG capability device nodes in the container"


def test_mps_claim_placed_by_volcano_gets_its_share_of_the_sms(vbed: SimCluster, vns: str) -> None:
    capacity = {Cap.MEMORY: "20Gi", Cap.CORES: "30"}
    apply(
        vbed,
        vns,
        [
            claim_template("mps", "mps.tessera.dev", capacity=capacity),
            volcano_pod(pod_with_template("mps", "mps"), name="mps"),
        ],
    )
    pod = placed_by_volcano(vbed, vns, "mps")
    (r,) = results(vbed, vns, pod, "gpu")
    assert attribute(vbed, H100, r["device"], Attr.TYPE) == "mps"
    assert consumed(r, Cap.MEMORY) == "20Gi" and consumed(r, Cap.CORES) == "30"
    assert container(vbed, vns, pod, "main").env_map()[THREAD_PERCENTAGE_ENV] == "30"
