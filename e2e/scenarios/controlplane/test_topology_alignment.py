"""GPUs and another driver's NICs that land together, on the real kube-scheduler (docs/topology.md): by the
8 x H100 node's Tessera pool, a second, tiny driver publishes NICs with `resource.kubernetes.io/pcieRoot` and
`numaNode` (tests/support/doubles/nic_driver.py); a claim for 2 GPUs + 2 NICs under `matchAttribute:
resource.kubernetes.io/pcieRoot` lands on the one PCIe switch that has two NICs, and `tessera explain`,
asked before the pod exists, names the same devices and says why the NICs elsewhere were passed over."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.names import PCIE_ROOT_ATTRIBUTE
from e2e.benches.pods import pod as bench_pod
from e2e.controlplane.launcher import ControlPlane
from e2e.harness.examples import device_classes
from e2e.harness.published_node import NODES_DIR, published_node
from e2e.harness.server_apply import ServerApply
from e2e.harness.verdicts import SchedulerVerdict, explain_verdict, scheduler_verdict
from tests.support.doubles.nic_driver import HGX_NICS, aligned_claim, nic_class, nic_slice

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180)]

NODE = "align-h100x8"
NICS = HGX_NICS


@pytest.fixture(scope="module")
def aligned_node(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> Iterator[dict[str, str]]:
    """The HGX node's Tessera pool and the NIC driver's pool; device name → pcieRoot of both."""

    classes = device_classes()
    ServerApply(k8s_api).apply([*classes, nic_class()])
    resource = k8s.ResourceV1Api(k8s_api)
    with published_node(k8s_api, node_file=NODES_DIR / "h100x8.yaml", name=NODE) as node:
        body = nic_slice(NODE, NICS)
        resource.create_resource_slice(k8s.V1ResourceSlice.model_validate(body))
        try:
            roots = {n.name: n.pcie_root for n in NICS}
            for d in node.devices:
                if PCIE_ROOT_ATTRIBUTE in d["attributes"]:
                    roots.setdefault(d["name"], d["attributes"][PCIE_ROOT_ATTRIBUTE]["string"])
            yield roots
        finally:
            with contextlib.suppress(ApiException):
                resource.delete_resource_slice(body["metadata"]["name"])


def explain_then_schedule(
    control_plane: ControlPlane, api: k8s.ApiClient, namespace: str, *, claim: str, pod: str, nics: int
) -> tuple[int, dict[str, Any], SchedulerVerdict]:
    """A claim for 2 GPUs + `nics` NICs under one pcieRoot: explain's prediction, asked before the pod exists,
    then kube-scheduler's decision for a pod using it on the node."""
    body = aligned_claim(claim, namespace, gpus=2, nics=nics)
    k8s.ResourceV1Api(api).create_namespaced_resource_claim(
        namespace, k8s.ResourceV1ResourceClaim.model_validate(body)
    )
    code, predicted = explain_verdict(
        [f"{namespace}/{claim}"], node=NODE, kubeconfig=control_plane.kubeconfig
    )
    manifest = bench_pod(pod, claim=claim, node_selector={"kubernetes.io/hostname": NODE})
    k8s.CoreV1Api(api).create_namespaced_pod(namespace, k8s.V1Pod.model_validate(manifest))
    return code, predicted, scheduler_verdict(api, namespace, pod, claim_name=lambda _pod: claim)


def test_two_gpus_and_two_nics_land_under_one_pcie_switch(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, e2e_namespace: str, aligned_node: dict[str, str]
) -> None:
    code, predicted, verdict = explain_then_schedule(
        control_plane, k8s_api, e2e_namespace, claim="gpus-and-nics", pod="aligned", nics=2
    )
    assert verdict.bound, verdict.message
    by_request: dict[str, list[str]] = {}
    for r in verdict.results:
        by_request.setdefault(str(r["request"]), []).append(str(r["device"]))
    assert sorted(by_request["gpus"]) == ["gpu-4", "gpu-5"]
    assert sorted(by_request["nics"]) == ["nic-2", "nic-3"]
    assert {aligned_node[d] for devices in by_request.values() for d in devices} == {"pci0000:55"}
    # explain, asked before the pod existed, picked the same devices and says why the others were passed over
    assert code == 0, predicted
    explained = {
        r["request"]: sorted(a.split("/", 1)[1] for a in r["allocated"]) for r in predicted["requests"]
    }
    assert explained == {k: sorted(v) for k, v in by_request.items()}
    nics = next(r for r in predicted["requests"] if r["request"] == "nics")
    why = {
        d["device"].split("/", 1)[1]: d["message"] for d in nics["devices"] if d.get("reason") == "constraint"
    }
    assert set(why) == {"nic-0", "nic-1", "nic-4"}
    assert f"matchAttribute {PCIE_ROOT_ATTRIBUTE}: pci0000:15 differs from pci0000:55" in why["nic-0"]


def test_no_pcie_switch_has_three_nics(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, e2e_namespace: str, aligned_node: dict[str, str]
) -> None:
    code, predicted, verdict = explain_then_schedule(
        control_plane, k8s_api, e2e_namespace, claim="three-nics", pod="three", nics=3
    )
    assert not verdict.bound
    assert code == 1 and predicted["satisfiable"] is False
