"""The fragmentation-aware device order on the real kube-scheduler: a mix the order before it (`by-gpu`)
fragments is placed in full, and `tessera explain` names the scheduler's device at every step, in both
orders."""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path

import pytest
from kubernetes import client as k8s

from dra_driver.core.device_order import DeviceOrder
from e2e.benches.scale.fragmentation import (
    Outcome,
    clean,
    exclusive_memory,
    node_file_with,
    ordered_node,
    play,
)
from e2e.benches.scale.workloads import mig, vgpu, whole
from e2e.controlplane.launcher import ControlPlane
from e2e.harness.server_apply import ServerApply
from e2e.harness.testbed import apply_device_classes
from e2e.harness.verdicts import explain_verdict

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), pytest.mark.mixes_families]

# On 3 x H100: a slice, a whole GPU, then MIG. by-gpu puts the whole GPU on GPU 1 and the 1g.10gb on GPU 2
# at slot 0, where the 4g.40gb would have to go; fragmentation-aware takes the whole GPU from the far end
# and the 1g.10gb from the top slot of GPU 1, which leaves slot 0 for the 4g.40gb.
MIX = [vgpu(10, 20), whole(), mig("1g.10gb"), mig("4g.40gb"), mig("1g.10gb")]


def explain_predictor(kubeconfig: Path, namespace: str, node: str) -> Callable[[str], str | None]:
    def predict(claim: str) -> str | None:
        code, verdict = explain_verdict([f"{namespace}/{claim}"], node=node, kubeconfig=kubeconfig)
        if code != 0:
            return None
        [allocated] = verdict["requests"][0]["allocated"]
        return str(allocated).split("/", 1)[1]

    return predict


def run(
    plane: ControlPlane, api: k8s.ApiClient, namespace: str, node_file: Path, order: DeviceOrder
) -> Outcome:
    with ordered_node(api, order, node_file=node_file, prefix="order-test") as node:
        try:
            return play(
                api,
                namespace=namespace,
                node=node.name,
                order=order.value,
                capacity=exclusive_memory(node.slices),
                events=[("arrive", want) for want in MIX],
                predict=explain_predictor(plane.kubeconfig, namespace, node.name),
            )
        finally:
            clean(api, namespace)


def test_the_new_order_places_a_mix_the_old_one_fragments(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, e2e_namespace: str, tmp_path: Path
) -> None:
    apply_device_classes(ServerApply(k8s_api))
    node_file = node_file_with(tmp_path, 3)
    old = run(control_plane, k8s_api, e2e_namespace, node_file, DeviceOrder.BY_GPU)
    assert old.devices == ("gpu-0-vgpu", "gpu-1", "gpu-2-mig-1g10gb-0")
    assert old.failed == "4g.40gb"
    new = run(control_plane, k8s_api, e2e_namespace, node_file, DeviceOrder.FRAGMENTATION_AWARE)
    assert new.devices == (
        "gpu-0-vgpu",
        "gpu-2",
        "gpu-1-mig-1g10gb-6",
        "gpu-1-mig-4g40gb-0",
        "gpu-1-mig-1g10gb-5",
    )
    assert new.failed is None and new.placed == len(MIX)
    # memory allocated when the stream ended: 10Gi slice + 80 GB GPU + two 1g.10gb + one 4g.40gb
    assert new.memory_bytes > old.memory_bytes
