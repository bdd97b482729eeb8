"""vGPU slices: exact limits in the container, packing up to `shares` per GPU within its memory, and a
claim no GPU can hold staying pending."""

from __future__ import annotations

import copy

import pytest

from dra_driver.libtessera.names import (
    CONTAINER_LIBRARY_PATH,
    LIMITS_FILE_NAME,
    VIEW_FILE_NAME,
    HamiEnv,
    container_claim_dir,
    container_gpu_dir,
)
from dra_driver.libtessera.view_layout import Part
from dra_driver.vocabulary.names import Attr, Cap, ClaimUID, GpuUUID
from e2e.harness.examples import example, find, renamed
from e2e.harness.kube import Json
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import (
    H100,
    apply,
    attribute,
    claim_of,
    consumed,
    container,
    pod_named,
    results,
    running,
    stays_pending,
    unschedulable_message,
    view_settles,
)

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]


def vgpu_template(name: str, memory: str, cores: str) -> Json:
    template = renamed(find(example("03-vgpu"), "ResourceClaimTemplate", "vgpu-3000mi-30"), name)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] = {
        Cap.MEMORY: memory,
        Cap.CORES: cores,
    }
    return template


def vgpu_pod(name: str, template: str, node: str) -> Json:
    pod = copy.deepcopy(find(example("03-vgpu"), "Pod", "vgpu-3000mi-30"))
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = template
    return pod_named(pod, name, node)


def test_vgpu_gets_exactly_its_limits(bed: SimCluster, ns: str) -> None:
    docs = example("03-vgpu")
    apply(
        bed,
        ns,
        [
            find(docs, "ResourceClaimTemplate", "vgpu-3000mi-30"),
            pod_named(find(docs, "Pod", "vgpu-3000mi-30"), "vgpu", H100),
        ],
    )
    pod = running(bed, ns, "vgpu")
    claim = claim_of(bed, ns, pod, "gpu")
    (result,) = results(bed, ns, pod, "gpu")
    assert consumed(result, Cap.MEMORY) == "3000Mi" and consumed(result, Cap.CORES) == "30"
    infer = container(bed, ns, pod, "infer")
    env = infer.env_map()
    assert env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == "3000m"
    assert env[f"{HamiEnv.SM_LIMIT_PREFIX}0"] == "30"
    assert env["LD_PRELOAD"] == CONTAINER_LIBRARY_PATH
    library = infer.mount_at(CONTAINER_LIBRARY_PATH)
    assert library is not None and library.read_only
    uid = ClaimUID(claim["metadata"]["uid"])
    claim_mount = infer.mount_at(container_claim_dir(uid))
    assert claim_mount is not None and not claim_mount.read_only
    limits = (bed.node(H100).claims_dir / uid / LIMITS_FILE_NAME).read_text()
    gpu_uuid = attribute(bed, H100, result["device"], Attr.UUID)
    assert f"gpu {gpu_uuid} memory {3000 << 20} cores 30" in limits
    # the GPU's view, read-only in the container: the claim's part of the frame is 30 % of it
    view_mount = infer.mount_at(container_gpu_dir(GpuUUID(gpu_uuid)))
    assert view_mount is not None and view_mount.read_only
    assert f"slot 1 view {container_gpu_dir(GpuUUID(gpu_uuid))}/{VIEW_FILE_NAME}" in limits
    # its place in the frame: alone and without work, it may start at once, up to its 30 % (the arbiter's
    # layout; it gets its part, 30 % of the frame, once a neighbour has work too)
    assert view_settles(bed, H100, gpu_uuid, (Part(1, 0, 0, 30),)) == (50_000, (Part(1, 0, 0, 30),))


def start_in_order(bed: SimCluster, ns: str, template: str, count: int, prefix: str) -> list[str]:
    """Creates the pods one after another (so the scheduler's first fit follows creation order) and returns
    the device each one got."""
    devices: list[str] = []
    for k in range(count):
        name = f"{prefix}-{k:02d}"
        apply(bed, ns, [vgpu_pod(name, template, H100)])
        (result,) = results(bed, ns, running(bed, ns, name), "gpu")
        devices.append(result["device"])
    return devices


def test_ten_slices_fill_one_gpu_before_the_next(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, [find(example("03-vgpu"), "ResourceClaimTemplate", "vgpu-3000mi-30")])
    devices = start_in_order(bed, ns, "vgpu-3000mi-30", 10, "slice")
    # 30 % of the SMs each: three fit a GPU (cores are capacity too, as with HAMi's gpucores), and each GPU
    # is filled before the next one is used.
    assert devices == ["gpu-0-vgpu"] * 3 + ["gpu-1-vgpu"] * 3 + ["gpu-2-vgpu"] * 3 + ["gpu-3-vgpu"]
    # the three slices on gpu-0, none with work: each may start at once up to its 30 % (with work, they
    # divide the frame: 30 % each, back to back; dra_driver/core/sm_schedule.py)
    gpu0 = attribute(bed, H100, "gpu-0-vgpu", Attr.UUID)
    idle = tuple(Part(slot, 0, 0, 30) for slot in (1, 2, 3))
    frame, parts = view_settles(bed, H100, gpu0, idle)
    assert frame == 50_000 and parts == idle


def test_shares_bound_a_gpu(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, [vgpu_template("vgpu-3000mi", "3000Mi", "0")])
    devices = start_in_order(bed, ns, "vgpu-3000mi", 11, "share")
    # No SM share asked: `shares` (10 per GPU) is the bound, long before memory (30000Mi of 81559Mi).
    assert devices == ["gpu-0-vgpu"] * 10 + ["gpu-1-vgpu"]


def test_memory_bounds_a_gpu(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, [vgpu_template("vgpu-30g", "30000Mi", "10")])
    devices = []
    for k in range(3):
        apply(bed, ns, [vgpu_pod(f"big-{k}", "vgpu-30g", H100)])
        (result,) = results(bed, ns, running(bed, ns, f"big-{k}"), "gpu")
        devices.append(result["device"])
    # Two 30000Mi slices fit an 81559Mi H100, a third does not.
    assert devices[0] == devices[1] != devices[2]


def test_claim_larger_than_any_gpu_stays_pending(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, [vgpu_template("vgpu-huge", "200Gi", "10"), vgpu_pod("huge", "vgpu-huge", H100)])
    pod = stays_pending(bed, ns, "huge", seconds=5)
    assert "Unschedulable" in unschedulable_message(pod), unschedulable_message(pod)
