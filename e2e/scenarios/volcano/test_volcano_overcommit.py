"""Issue #31's over-commit: a PodGroup (minMember 3) of whole-GPU pods, with two GPUs whole-free and a third
GPU whose vgpu device holds a live share. The gang does not fit, so Volcano must bind none of it.

The snapshot's vc-scheduler vendors k8s.io/dynamic-resource-allocation v0.36.1, whose allocator rebuilds a
pool's free counters from `AllocatedDevices` only: the counters a multi-allocatable device (vgpu, MPS) took at
its first share are forgotten in the next scheduling cycle (kubernetes/kubernetes#139034, fixed by #139040 in
v0.36.2). It binds the gang and hands out the shared GPU whole; Tessera's prepare refuses it and the gang runs
2 of 3. The same scheduler built with v0.36.3 keeps the gang waiting, and so does the stock one once Tessera
is told its allocator's release (`schedulerVersion`): a node then offers vgpu and MPS only alone
(docs/volcano.md, "Over-commit of shared GPUs")."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dra_driver.vocabulary.names import DRIVER_NAME, Attr, Cap, qualified
from e2e.harness.kube import (
    Json,
    delete_namespace_contents,
    get_pod,
    is_running,
    wait_for,
)
from e2e.harness.node import NODES_DIR, SimNode
from e2e.harness.testbed import SimCluster, start_node
from e2e.scenarios.probes import H100, apply, attribute, results, running
from e2e.volcano.gangs import bound_result, gang_waits
from e2e.volcano.launcher import Volcano
from e2e.volcano.workloads import claim_template, pod_with_template, podgroup, volcano_pod
from kubelet_plugin.node.events import EVENT_NAMESPACE, SHARING_UNENFORCED_REASON

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(300)]

GANG = 3
H200_NODE = NODES_DIR / "h200x8.yaml"
H200 = "sim-h200x8"
SHARED = frozenset({"vgpu", "mps"})
# The release of the allocator the snapshot's vc-scheduler vendors (its go.mod: k8s.io/kubernetes v1.36.1).
VENDORED = "v1.36.1"
SETTINGS_HEADER = "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\n"


@dataclass(frozen=True, slots=True)
class Setup:
    share: Json  # the live vgpu share's allocation result
    held: dict[str, str]  # kube-scheduler's pods holding whole GPUs of H100 → their GPU
    free: frozenset[str]  # whole GPUs of H100 left


def prepare_setup(bed: SimCluster, ns: str, *, share_node: str, share_cel: str, fill: int) -> Setup:
    """A vgpu share (kube-scheduler), then `fill` whole GPUs of H100 held by kube-scheduler's pods."""
    slice_capacity = {Cap.MEMORY: "2Gi", Cap.CORES: "10"}
    apply(bed, ns, [claim_template("share", "vgpu.tessera.dev", cel=share_cel, capacity=slice_capacity)])
    apply(bed, ns, [pod_with_template("share", "share", node=share_node)])
    (share,) = results(bed, ns, running(bed, ns, "share"), "gpu")
    apply(bed, ns, [claim_template("whole", "gpu.tessera.dev")])
    apply(bed, ns, [pod_with_template(f"held-{i}", "whole", node=H100) for i in range(fill)])
    held = {
        f"held-{i}": results(bed, ns, running(bed, ns, f"held-{i}"), "gpu")[0]["device"] for i in range(fill)
    }
    whole = {name for name, kind in device_types(bed, H100).items() if kind == "gpu"}
    return Setup(share=share, held=held, free=frozenset(whole - set(held.values()) - {shared_gpu(share)}))


def shared_gpu(share: Json) -> str:
    """`gpu-0` for a share on `gpu-0-vgpu`."""
    return str(share["device"]).removesuffix("-vgpu")


def submit_gang(bed: SimCluster, ns: str) -> list[str]:
    names = [f"gang-{i}" for i in range(GANG)]
    docs = [podgroup("gang", min_member=GANG)]
    docs += [volcano_pod(pod_with_template(n, "whole"), name=n, group="gang") for n in names]
    apply(bed, ns, docs)
    return names


def gang_runs_on(bed: SimCluster, ns: str, names: list[str]) -> set[str]:
    return {results(bed, ns, running(bed, ns, n, timeout_s=120), "gpu")[0]["device"] for n in names}


def make_room(bed: SimCluster, ns: str, setup: Setup) -> str:
    """Deletes the first held pod; returns the GPU it gave back."""
    bed.kubectl.run("delete", "pod", "held-0", f"--namespace={ns}", "--wait=true")
    return setup.held["held-0"]


def test_stock_volcano_hands_out_the_gpu_a_share_holds(vbed: SimCluster, vns: str, volcano: Volcano) -> None:
    """The bug, as upstream Volcano ships it: when this test fails, Volcano's allocator counts shared
    counters and docs/volcano.md's configuration is no longer needed."""
    assert volcano.scheduler_binary == volcano.binaries.scheduler
    gpu0 = str(attribute(vbed, H100, "gpu-0", Attr.UUID))
    setup = prepare_setup(vbed, vns, share_node=H100, share_cel=parent_is(gpu0), fill=8 - 1 - (GANG - 1))
    assert shared_gpu(setup.share) == "gpu-0" and "gpu-0" not in setup.held.values()
    assert len(setup.free) == GANG - 1
    names = submit_gang(vbed, vns)
    given: dict[str, str] = {}
    for name in names:
        bound: Json = wait_for(
            f"Volcano to bind {name}", partial(bound_result, vbed, vns, name), timeout_s=60
        )
        given[name] = bound["device"]
    assert set(given.values()) == set(setup.free) | {"gpu-0"}, given
    # The share is still there: gpu-0 is now both whole and shared, and the node refuses to prepare it.
    assert results(vbed, vns, get_pod(vbed.api, vns, "share") or {}, "gpu")[0]["device"] == "gpu-0-vgpu"
    over = next(n for n, device in given.items() if device == "gpu-0")
    refused = wait_for(f"the node to refuse {over}", lambda: prepare_refusals(vbed, vns, over), timeout_s=30)
    assert any("gpu-0" in m for m in refused), refused
    assert not is_running(get_pod(vbed.api, vns, over))


def test_volcano_with_the_fixed_allocator_keeps_the_gang_waiting(
    vbed: SimCluster, vns: str, volcano: Volcano
) -> None:
    volcano.use_scheduler(volcano.binaries.scheduler_dra_patched)
    try:
        gpu0 = str(attribute(vbed, H100, "gpu-0", Attr.UUID))
        setup = prepare_setup(vbed, vns, share_node=H100, share_cel=parent_is(gpu0), fill=8 - 1 - (GANG - 1))
        names = submit_gang(vbed, vns)
        gang_waits(vbed, vns, names, seconds=15)
        returned = make_room(vbed, vns, setup)
        assert gang_runs_on(vbed, vns, names) == set(setup.free) | {returned}
    finally:
        volcano.use_scheduler(volcano.binaries.scheduler)


@pytest.fixture
def split_nodes(vbed: SimCluster, vns: str, tmp_path: Path) -> Iterator[SimNode]:
    """Tessera told that Volcano's allocator is v1.36.1's (`schedulerVersion`, the chart value): the H100
    node, asked for every family, withholds vgpu and MPS by itself; an H200 node offers vgpu alone
    (nodeGroups[].families: [vgpu]). The H100 node offers every family again afterwards."""
    h100 = vbed.node(H100)
    told = tmp_path / "every-family.yaml"
    told.write_text(
        f"apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nschedulerVersion: {VENDORED!r}\n"
    )
    shared = tmp_path / "vgpu-only.yaml"
    shared.write_text(
        f"{SETTINGS_HEADER}schedulerVersion: {VENDORED!r}\nfamilies: {{gpu: false, mig: false, mps: false}}\n"
    )
    h100.settings_file = told
    h100.restart_plugin()
    wait_for("H100 to withdraw its vgpu devices", lambda: not set(device_types(vbed, H100).values()) & SHARED)
    h200 = start_node(vbed, H200_NODE, root=h100.root.parent / "h200", settings_file=shared)
    try:
        yield h200
    finally:
        # The scenario's pods first, while the H200 node still runs to finalize its own.
        delete_namespace_contents(vbed.api, vns, timeout_s=90)
        h200.stop()
        vbed.nodes.pop(h200.name, None)
        h100.settings_file = None
        h100.restart_plugin()
        wait_for("H100 to offer vgpu again", lambda: "vgpu" in device_types(vbed, H100).values())


def test_stock_volcano_is_safe_once_tessera_knows_its_allocator(
    vbed: SimCluster, vns: str, volcano: Volcano, split_nodes: SimNode
) -> None:
    """The configuration docs/volcano.md gives a Volcano cluster, under the gang of the first test."""
    assert volcano.scheduler_binary == volcano.binaries.scheduler
    assert set(device_types(vbed, H100).values()) == {"gpu", "mig"}
    assert set(device_types(vbed, H200).values()) == {"vgpu"}
    (warning,) = unenforced_events(vbed, H100)
    assert warning.type == "Warning" and f"the allocator of {VENDORED}" in (warning.message or "")
    assert not unenforced_events(vbed, H200)
    setup = prepare_setup(vbed, vns, share_node=H200, share_cel="true", fill=8 - (GANG - 1))
    assert setup.share["pool"] == H200 and len(setup.free) == GANG - 1
    names = submit_gang(vbed, vns)
    gang_waits(vbed, vns, names, seconds=15)
    returned = make_room(vbed, vns, setup)
    assert gang_runs_on(vbed, vns, names) == set(setup.free) | {returned}


def unenforced_events(bed: SimCluster, node: str) -> list[k8s.CoreV1Event]:
    listed = k8s.CoreV1Api(bed.api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={node},reason={SHARING_UNENFORCED_REASON}"
    )
    return list(listed.items or [])


def parent_is(uuid: str) -> str:
    return f'device.attributes["{DRIVER_NAME}"].{Attr.PARENT_UUID} == "{uuid}"'


def device_types(bed: SimCluster, node: str) -> dict[str, str]:
    """The node's published devices → their `type` attribute."""
    return {
        d["name"]: str(next(iter(d["attributes"][qualified(Attr.TYPE)].values())))
        for s in bed.node(node).slices()
        for d in s["spec"].get("devices") or []
    }


def prepare_refusals(bed: SimCluster, ns: str, pod: str) -> list[str]:
    events = k8s.CoreV1Api(bed.api).list_namespaced_event(ns, field_selector=f"involvedObject.name={pod}")
    return [e.message or "" for e in events.items if e.reason == "FailedPrepareDynamicResources"]
