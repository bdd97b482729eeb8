"""Volcano as the scheduler of the real node: pods with `schedulerName: volcano` and whole-GPU, MIG, MPS and
vgpu claims are bound by vc-scheduler (its `Scheduled` event, none from kube-scheduler, which runs beside it),
their claims allocated by it on the real node's pool, prepared by the helm-installed plugin, and the
containers run with the device and the limits the claims asked for; and on the vgpu layout, Volcano's own
promises: a gang that starts all together or not at all, a queue that holds no more than its capability, and
Volcano's vGPU example pod converted by the chart's webhook and kept Volcano's.

The configuration is the one docs/volcano.md gives a real cluster under Volcano main, whose allocator is
v1.36.1's: the chart's `schedulerVersion: v1.36.1`, so that vgpu and MPS are offered only by a node group of
their own. The real node is one node, so it plays the groups in turn (one `helm upgrade` of its group's
families per layout: e2e/realnode/layouts.py): every family asked for, of which the node withholds vgpu and
MPS (a `SharingUnenforced` Warning) and Volcano places a whole GPU and a MIG instance; then [mps]; then
[vgpu], with the admission webhook turned on in the same upgrade. Volcano (e2e/volcano, the configuration of
the Volcano scenarios) runs for this module only; the last test switches its scheduler to the `capacity`
plugin, and the chart is set back after the module (webhook off)."""

from __future__ import annotations

import time
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from admission.convert.names import CONVERTED_ANNOTATION
from dra_driver.core.families.mps import PINNED_MEMORY_ENV, THREAD_PERCENTAGE_ENV
from dra_driver.vocabulary.names import DRIVER_NAME, Cap
from e2e.harness.kube import Json, WaitTimeoutError, scheduled_by, wait_for
from e2e.harness.testbed import SimCluster
from e2e.realnode.config import PROBE_IMAGE
from e2e.realnode.layouts import Layout, Layouts
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, mig, mps, probe_pod, vgpu, whole_gpu
from e2e.volcano.config import SCHEDULER_NAME, capacity_conf
from e2e.volcano.gangs import (
    bound,
    gang_waits,
    podgroup_condition,
    read_podgroup,
    stays_unbound,
)
from e2e.volcano.launcher import Volcano
from e2e.volcano.pytest_fixture import start_volcano
from e2e.volcano.workloads import podgroup, queue, volcano_pod
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
# The node groups it plays: every family asked for (vgpu and MPS withheld), MPS alone, vgpu alone with the
# webhook; and the release as installed, set back after the module.
EVERY_FAMILY_FOR_VOLCANO = Layout(VOLCANO_ALLOCATOR, tuple(EVERY_FAMILY), frozenset({"gpu", "mig"}))
MPS_FOR_VOLCANO = Layout(VOLCANO_ALLOCATOR, ("mps",), frozenset({"mps"}))
VGPU_FOR_VOLCANO = Layout(VOLCANO_ALLOCATOR, ("vgpu",), frozenset({"vgpu"}), webhook=True)
AS_INSTALLED = Layout("", tuple(EVERY_FAMILY), frozenset(EVERY_FAMILY))
VGPU_MIB, VGPU_CORES = 3000, "30"
MPS_MIB, MPS_CORES = 2000, "40"
# The gang: 4 workers of 40 % of the SMs each, two per GPU of the node's two; beside the 30 % slice above, one
# GPU holds only one more (30 + 40 + 40 > 100): room for 3.
WORKERS, WORKER_MIB, WORKER_CORES = 4, 1000, "40"
# The queue: room for one 2000Mi slice (every capacity the claims request named: docs/volcano.md, "Queues").
QUEUE, QUEUED_MIB = "vc-real", 2000
# What the gang's workers and the queue's pods ask of the node besides their claims, as the Volcano scenarios'
# pods do (e2e/volcano/workloads.py).
REQUESTS = {"cpu": "10m", "memory": "16Mi"}
QUEUE_CAPABILITY = {
    "memory.deviceclass/vgpu.tessera.dev": f"{QUEUED_MIB}Mi",
    "cores.deviceclass/vgpu.tessera.dev": "100",
}
# Volcano's vGPU example (admission/examples): one vGPU of 1024 MiB.
EXAMPLE = Path(__file__).resolve().parents[3] / "admission" / "examples" / "volcano-vgpu.yaml"
EXAMPLE_MIB = 1024


@pytest.fixture(scope="module")
def volcano(real_node: RealNode) -> Iterator[Volcano]:
    """vc-scheduler and vc-controller-manager on the real node's plane, for this module only."""
    started = start_volcano(real_node.plane)
    try:
        yield started
    finally:
        started.stop()


@pytest.fixture(scope="module")
def layout(real_node: RealNode, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Layouts]:
    """The release's layouts in turn; after the module, the release as installed (every family, no
    schedulerVersion, the webhook off)."""
    layouts = Layouts(real_node, tmp_path_factory.mktemp("volcano-values"))
    try:
        yield layouts
    finally:
        if layouts.changed:
            layouts.use(AS_INSTALLED)


def placed_by_volcano(node: RealNode, ns: str, name: str) -> Json:
    started = time.monotonic()
    pod = running(node, ns, name, timeout_s=120)
    print(f"{name}: placed by Volcano and running in {time.monotonic() - started:.1f}s")
    assert pod["spec"]["schedulerName"] == SCHEDULER_NAME
    assert pod["spec"]["nodeName"] == node.name
    scheduled = scheduled_by(node.api, ns, name)
    assert scheduled == {SCHEDULER_NAME}, scheduled
    return pod


def on_real_node(node: RealNode, ns: str, pod: Json, entry: str) -> Json:
    (result,) = results(node, ns, pod, entry)
    assert result["driver"] == DRIVER_NAME and result["pool"] == node.name, result
    return result


def volcano_probe(
    node: RealNode,
    name: str,
    template: str,
    args: tuple[str, ...],
    *,
    group: str | None = None,
    requests: dict[str, str] | None = None,
) -> Json:
    """A probe pod for Volcano, in PodGroup `group` when given; `requests` (CPU, memory) as a batch job's
    workers ask, which makes it no best-effort pod: Volcano's `allocate` action places it, not `backfill`."""
    pod = probe_pod(
        name,
        node=node.name,
        templates={"gpu": template},
        containers=[ProbeContainer("cuda", args, claims=("gpu",))],
    )
    if requests:
        pod["spec"]["containers"][0]["resources"]["requests"] = dict(requests)
    return volcano_pod(pod, name=name, group=group)


def volcano_verdict(bed: SimCluster, ns: str, group: str, said: Callable[[], str | None]) -> str:
    """What Volcano said of PodGroup `group` once it said it (`said`); if it did not within a minute, the
    test fails with the group's status, what it said instead."""
    try:
        return str(wait_for(f"Volcano's verdict on PodGroup {group}", said, timeout_s=60, interval_s=0.5))
    except WaitTimeoutError:
        status = read_podgroup(bed, ns, group).get("status")
        pytest.fail(f"Volcano did not say it of PodGroup {group}; its status: {status}", pytrace=False)


def assert_slice_limits(node: RealNode, pod: Json, *, mib: int, cores: str) -> None:
    """The container of a vgpu pod sees its slice: the HAMi limits, and CUDA's total at the memory limit."""
    got = report(node, pod, "cuda")
    assert got["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{mib}m"
    assert got["env"]["CUDA_DEVICE_SM_LIMIT_0"] == cores
    assert limited_gpu(got)["total"] == mib * MIB


def test_whole_gpu_and_mig_placed_by_volcano(
    bed: SimCluster, real_node: RealNode, volcano: Volcano, layout: Layouts, real_ns: str
) -> None:
    assert volcano.scheduler_binary == volcano.binaries.scheduler  # Volcano main as shipped
    # Every family asked for: the node, told Volcano's allocator, withholds vgpu and MPS and says why.
    layout.use(EVERY_FAMILY_FOR_VOLCANO)
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


def test_an_mps_client_placed_by_volcano(
    bed: SimCluster, real_node: RealNode, volcano: Volcano, layout: Layouts, real_ns: str
) -> None:
    """A group of MPS alone: an MPS client with its share of the SMs and its pinned memory."""
    layout.use(MPS_FOR_VOLCANO)
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


def test_a_vgpu_slice_and_a_gang_of_vgpu_workers(
    bed: SimCluster, real_node: RealNode, volcano: Volcano, layout: Layouts, real_ns: str
) -> None:
    """A group of vgpu alone: a slice with its memory and SM limits in the container; beside it a gang
    (PodGroup, minMember 4) of vgpu workers with room for 3 waits whole, and starts whole once the slice
    ends."""
    layout.use(VGPU_FOR_VOLCANO)
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

    # The gang, with the slice holding 30 % of one GPU's SMs: room for 3 of its 4 workers.
    workers = [f"worker-{i}" for i in range(WORKERS)]
    apply(
        bed,
        real_ns,
        [
            claim_template("worker", vgpu(f"{WORKER_MIB}Mi", WORKER_CORES)),
            podgroup("workers", min_member=WORKERS),
            *[
                volcano_probe(real_node, n, "worker", ("hold", "100"), group="workers", requests=REQUESTS)
                for n in workers
            ],
        ],
    )
    # Volcano found room for 3 and placed none: its gang plugin's verdict on the PodGroup ...
    verdict = volcano_verdict(
        bed,
        real_ns,
        "workers",
        lambda: podgroup_condition(bed, real_ns, "workers", "Unschedulable", prefix=f"1/{WORKERS} tasks"),
    )
    print(f"gang of {WORKERS}: {verdict}")
    # ... and none bound, no claim of the gang allocated, for several of its 1 s cycles.
    gang_waits(bed, real_ns, workers, seconds=4)

    delete_pod(real_node, real_ns, "slice")
    freed = time.monotonic()
    bound_at: dict[str, float] = {}

    def all_bound() -> bool:
        for name in bound(bed, real_ns, workers):
            bound_at.setdefault(name, time.monotonic())
        return len(bound_at) == WORKERS

    wait_for("the gang to be bound", all_bound, timeout_s=60, interval_s=0.05)
    spread = max(bound_at.values()) - min(bound_at.values())
    after = min(bound_at.values()) - freed
    print(f"gang of {WORKERS}: bound {after:.1f}s after the slice ended, all within {spread:.2f}s")
    pods = [placed_by_volcano(real_node, real_ns, n) for n in workers]
    devices = [on_real_node(real_node, real_ns, p, "gpu")["device"] for p in pods]
    assert sorted(devices) == ["gpu-0-vgpu", "gpu-0-vgpu", "gpu-1-vgpu", "gpu-1-vgpu"], devices
    for p in pods:
        (r,) = results(real_node, real_ns, p, "gpu")
        assert r["consumedCapacity"][Cap.CORES] == WORKER_CORES
    assert_slice_limits(real_node, pods[0], mib=WORKER_MIB, cores=WORKER_CORES)


def volcano_vgpu_example(node: RealNode) -> Json:
    """Volcano's vGPU example as its users write it (`schedulerName: volcano`, `volcano.sh/vgpu-number: 1`,
    `vgpu-memory: 1024`), but for the probe in its container (the node pulls no image) and the real node's
    toleration."""
    pod: Json = yaml.safe_load(EXAMPLE.read_text())
    (container,) = pod["spec"]["containers"]
    container["image"] = PROBE_IMAGE
    container.pop("command")
    container["args"] = ["fill"]
    pod["spec"]["tolerations"] = probe_pod("x", node=node.name, containers=[])["spec"]["tolerations"]
    return pod


def test_volcanos_vgpu_pod_converted_by_the_webhook_stays_volcanos(
    bed: SimCluster, real_node: RealNode, volcano: Volcano, layout: Layouts, real_ns: str
) -> None:
    """The chart's webhook (`admissionWebhook.volcano: auto`) sees Volcano's API served: it converts the pod
    to a claim and keeps its scheduler, so vc-scheduler allocates the claim and binds it."""
    layout.use(VGPU_FOR_VOLCANO)
    example = volcano_vgpu_example(real_node)
    name, (container,) = example["metadata"]["name"], example["spec"]["containers"]
    apply(bed, real_ns, [example])
    pod = placed_by_volcano(real_node, real_ns, name)
    assert CONVERTED_ANNOTATION in pod["metadata"]["annotations"]
    (spec,) = pod["spec"]["containers"]
    assert not any(k.startswith("volcano.sh/") for k in (spec["resources"].get("limits") or {}))
    [entry] = pod["spec"]["resourceClaims"]
    result = on_real_node(real_node, real_ns, pod, entry["name"])
    assert result["device"].endswith("-vgpu") and result["consumedCapacity"][Cap.MEMORY] == "1Gi", result
    got = report(real_node, pod, container["name"])
    assert got["env"]["CUDA_DEVICE_MEMORY_LIMIT_0"] == f"{EXAMPLE_MIB}m"
    assert limited_gpu(got)["total"] == EXAMPLE_MIB * MIB


@pytest.fixture
def capped_queue(bed: SimCluster, volcano: Volcano) -> Iterator[str]:
    """vc-scheduler with the `capacity` plugin (its DRA queue quota) in place of `proportion`, and a queue
    capped at one slice; the module's last test: Volcano stops after it, the queue with its CRD."""
    volcano.use_conf(capacity_conf())
    bed.server_apply.apply([queue(QUEUE, capability=QUEUE_CAPABILITY)])
    yield QUEUE


def test_a_capped_queue_holds_a_second_pod_until_the_first_ends(
    bed: SimCluster, real_node: RealNode, volcano: Volcano, layout: Layouts, real_ns: str, capped_queue: str
) -> None:
    """Volcano's `capacity` plugin on the real node: a queue capped at one 2000Mi slice places one pod of
    two; the other stays unbound, its claim unallocated, with both GPUs nearly free, until the first ends."""
    layout.use(VGPU_FOR_VOLCANO)
    apply(
        bed,
        real_ns,
        [
            claim_template("queued", vgpu(f"{QUEUED_MIB}Mi", "10")),
            podgroup("first", min_member=1, queue=capped_queue),
            podgroup("second", min_member=1, queue=capped_queue),
            volcano_probe(real_node, "first", "queued", ("hold", "100"), group="first", requests=REQUESTS),
        ],
    )
    placed_by_volcano(real_node, real_ns, "first")
    apply(
        bed,
        real_ns,
        [volcano_probe(real_node, "second", "queued", ("hold", "100"), group="second", requests=REQUESTS)],
    )
    # The queue is at its capability (the GPUs are not: 2 GiB of 160 taken): Volcano keeps the second out ...
    # (the capacity plugin says why at allocation, in its log only: the PodGroup says "1/1 tasks in gang
    # unschedulable", whatever held it back)
    said = f"Queue <{capped_queue}> DRA resource insufficient for candidate <second>"
    log = volcano.scheduler_log
    refused = volcano_verdict(
        bed, real_ns, "second", lambda: said if said in log.read_text(errors="replace") else None
    )
    print(f"queue {capped_queue}: {refused}")
    # ... unbound, its claim unallocated, for several of its cycles.
    stays_unbound(bed, real_ns, ["second"], seconds=4)

    delete_pod(real_node, real_ns, "first")
    pod = placed_by_volcano(real_node, real_ns, "second")
    (result,) = results(real_node, real_ns, pod, "gpu")
    assert result["consumedCapacity"][Cap.MEMORY] == f"{QUEUED_MIB}Mi"
