"""A whole cluster of a release that cannot enforce sharing (1.35 or 1.34 with their default gates), with a
simulated 8 x H100 node: its plugin and kubelet stand-in as users run them.

Shown in order, on a node offering every family: only whole GPUs are published, with a Warning Event on the
Node; a whole-GPU pod runs; a vgpu claim stays pending and `tessera explain` names the reason; then the
administrator turns the gates on (kube-apiserver, kube-controller-manager and kube-scheduler restarted with
them) and, with nothing else done, the plugin publishes MIG again. It never publishes vgpu or MPS beside
whole GPUs and MIG there: these releases' kube-scheduler ignores the counters shared devices hold
(kubernetes/kubernetes#139040). A second node, whose group offers vgpu alone, serves the waiting claim.
"""

from __future__ import annotations

import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import private_control_plane, wait_for_service_account
from e2e.controlplane.releases import legacy_release
from e2e.harness.kube import get_claim, get_pod, is_running, wait_for, wait_running
from e2e.harness.node import driver_slices
from e2e.harness.testbed import H100_NODE, MIXED_NODE, SimCluster, make_testbed, start_node
from e2e.harness.verdicts import explain_verdict
from kubelet_plugin.node.events import EVENT_NAMESPACE, SHARING_UNENFORCED_REASON
from kubelet_plugin.publish.publisher import DEGRADED_REASON, RESTORED_REASON

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(420)]
LEGACY = legacy_release()
NAMESPACE = "legacy"
Json = dict[str, Any]
H100 = "sim-h100x8"


@pytest.fixture(scope="module")
def plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with private_control_plane(
        tmp_path_factory.mktemp("controlplane-legacy-node"), release=LEGACY, gate_profile="default"
    ) as p:
        yield p


@pytest.fixture(scope="module")
def legacy(plane: ControlPlane) -> Iterator[SimCluster]:
    with plane.api_client() as api:
        testbed = make_testbed(plane, api)
        k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": NAMESPACE}}))
        wait_for_service_account(api, NAMESPACE)
        root = Path(tempfile.mkdtemp(prefix="te-leg-", dir="/tmp"))
        start_node(testbed, H100_NODE, root=root / "h100")
        try:
            yield testbed
        finally:
            for node in testbed.nodes.values():
                node.stop()


def device_names(legacy: SimCluster, node: str = H100) -> list[str]:
    slices = driver_slices(legacy.api, node)
    return sorted(d["name"] for s in slices for d in s["spec"].get("devices") or [])


def node_events(legacy: SimCluster, reason: str, node: str = H100) -> list[k8s.CoreV1Event]:
    listed = k8s.CoreV1Api(legacy.api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={node},reason={reason}"
    )
    return list(listed.items or [])


def probe_rounds(legacy: SimCluster) -> int:
    """How often the plugin asked the API server (dry-run) and found its fields still not kept."""
    return (legacy.node(H100).logs / "plugin.log").read_text().count('"publisher.still_dropped"')


def pod_with_claim(name: str, device_class: str, capacity: Json | None = None) -> list[Json]:
    exactly: Json = {"deviceClassName": device_class}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}},
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": NAMESPACE},
        "spec": {
            "containers": [{"name": "app", "image": "busybox", "resources": {"claims": [{"name": "gpu"}]}}],
            "resourceClaims": [{"name": "gpu", "resourceClaimName": name}],
        },
    }
    return [claim, pod]


def test_the_release_is_what_users_run(plane: ControlPlane) -> None:
    assert not LEGACY.serves_sharing()
    assert plane.feature_gates == {}, "a legacy release runs with its default gates"
    with plane.api_client() as api:
        assert k8s.VersionApi(api).get_code().git_version == LEGACY.version


def test_only_whole_gpus_are_published_with_a_warning(legacy: SimCluster) -> None:
    # The first publish is the full pool, which the server strips; the fallback follows at once.
    whole = [f"gpu-{i}" for i in range(8)]
    wait_for("the whole-GPU fallback", lambda: device_names(legacy) == whole, timeout_s=30)
    assert not any(s["spec"].get("sharedCounters") for s in driver_slices(legacy.api, H100))
    (event,) = wait_for("the Warning Event", lambda: node_events(legacy, DEGRADED_REASON))
    assert event.type == "Warning"
    assert "DRAPartitionableDevices and DRAConsumableCapacity" in (event.message or "")


def test_a_whole_gpu_pod_runs(legacy: SimCluster) -> None:
    legacy.server_apply.apply(pod_with_claim("whole", "gpu.tessera.dev"), namespace=NAMESPACE)
    pod = wait_running(legacy.api, NAMESPACE, "whole", timeout_s=60)
    claim = get_claim(legacy.api, NAMESPACE, "whole")
    assert claim is not None
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    assert result["device"].startswith("gpu-") and result["device"].count("-") == 1
    assert pod["spec"]["nodeName"] == H100


def test_a_vgpu_claim_waits_and_explain_names_the_reason(legacy: SimCluster) -> None:
    legacy.server_apply.apply(
        pod_with_claim("slice", "vgpu.tessera.dev", {"memory": "3000Mi", "cores": "30"}), namespace=NAMESPACE
    )

    def unschedulable() -> bool:
        pod = get_pod(legacy.api, NAMESPACE, "slice") or {}
        conditions = (pod.get("status") or {}).get("conditions") or []
        return any(c.get("type") == "PodScheduled" and c.get("status") == "False" for c in conditions)

    wait_for("the scheduler to give up on the vgpu pod", unschedulable, timeout_s=60)
    # DRAConsumableCapacity off: the API server dropped the claim's capacity requests when it stored it.
    stored = get_claim(legacy.api, NAMESPACE, "slice")
    assert stored is not None and "capacity" not in stored["spec"]["devices"]["requests"][0]["exactly"]
    code, verdict = explain_verdict([f"{NAMESPACE}/slice"], node=H100, kubeconfig=legacy.plane.kubeconfig)
    assert code != 0
    problems = " ".join(str(r.get("problem") or "") for r in verdict["requests"])
    assert "this cluster does not serve shared counters" in problems, verdict
    assert "DRAPartitionableDevices and DRAConsumableCapacity" in problems


def test_turning_the_gates_on_brings_mig_back_but_never_sharing_beside_it(legacy: SimCluster) -> None:
    legacy.plane.switch_gates(LEGACY.profile("sharing"))
    if not LEGACY.accepts_counter_slices():
        # 1.34's alpha API refuses counter sets in slices of their own: the probe finds them refused, and the
        # node stays on whole GPUs, with the gates on too.
        before = probe_rounds(legacy)
        wait_for("a probe of the restarted API server", lambda: probe_rounds(legacy) > before, timeout_s=150)
        assert device_names(legacy) == [f"gpu-{i}" for i in range(8)]
        assert not node_events(legacy, RESTORED_REASON)
        pytest.skip(f"{LEGACY.version} refuses Tessera's counter slices: whole GPUs only, gates or not")
    # The API server restart breaks the plugin's watch; its resync asks (dry-run) whether the fields are kept.
    wait_for("MIG devices", lambda: "gpu-0-mig-1g10gb-0" in device_names(legacy), timeout_s=90)
    names = device_names(legacy)
    assert not any(n.endswith(("-vgpu", "-mps")) for n in names), names
    assert any(s["spec"].get("sharedCounters") for s in driver_slices(legacy.api, H100))
    (restored,) = wait_for("the Normal Event", lambda: node_events(legacy, RESTORED_REASON))
    assert restored.type == "Normal" and "every family" in (restored.message or "")
    (unenforced,) = node_events(legacy, SHARING_UNENFORCED_REASON)
    assert unenforced.type == "Warning"
    assert f"not publishing mps, vgpu: kube-scheduler {LEGACY.version}" in (unenforced.message or "")
    assert "#139040" in (unenforced.message or "")
    pod = get_pod(legacy.api, NAMESPACE, "slice") or {}
    assert not is_running(pod) and not (pod.get("spec") or {}).get("nodeName")


def test_a_node_group_offering_vgpu_alone_serves_the_waiting_claim(
    legacy: SimCluster, tmp_path: Path
) -> None:
    if not LEGACY.accepts_counter_slices():
        pytest.skip(
            f"Tessera offers the sharing families from 1.35 on; on {LEGACY.version} with the gates on, a "
            "3000Mi/30 % claim stayed unschedulable on a vgpu-only node with free GPUs (seen, not "
            "investigated)"
        )
    settings = tmp_path / "vgpu-only.yaml"
    settings.write_text(
        "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\n"
        "families: {gpu: false, mig: false, mps: false}\n"
    )
    root = Path(tempfile.mkdtemp(prefix="te-leg-", dir="/tmp"))
    node = start_node(legacy, MIXED_NODE, root=root / "mixed", settings_file=settings)
    assert device_names(legacy, node.name) == [f"gpu-{i}-vgpu" for i in range(4)]
    assert not node_events(legacy, SHARING_UNENFORCED_REASON, node.name)
    # The pod that waited is scheduled there by itself, with the class defaults in place of the requests the
    # server dropped: all of the GPU's memory and no SM limit, so it shares that GPU with nobody.
    running = wait_running(legacy.api, NAMESPACE, "slice", timeout_s=120)
    assert running["spec"]["nodeName"] == node.name
    old = allocated(legacy, "slice")
    assert old["device"].endswith("-vgpu") and old["consumedCapacity"]["cores"] == "0"
    # A claim made now keeps its requests.
    legacy.server_apply.apply(
        pod_with_claim("slice2", "vgpu.tessera.dev", {"memory": "3000Mi", "cores": "30"}), namespace=NAMESPACE
    )
    assert is_running(wait_running(legacy.api, NAMESPACE, "slice2", timeout_s=60))
    new = allocated(legacy, "slice2")
    assert new["consumedCapacity"] == {"memory": "3000Mi", "cores": "30", "shares": "1"}


def allocated(legacy: SimCluster, claim_name: str) -> Json:
    claim = get_claim(legacy.api, NAMESPACE, claim_name)
    assert claim is not None
    (result,) = claim["status"]["allocation"]["devices"]["results"]
    return dict(result)
