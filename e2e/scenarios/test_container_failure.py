"""What a runtime refuses fails the container, not the node: with the interception library missing on the
host, a vGPU pod's container cannot be created (its bind mount has no source); the pod stays Pending with
CreateContainerError until the library is back."""

from __future__ import annotations

import pytest

from e2e.harness.examples import example, find, pinned
from e2e.harness.kube import get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, running, runtime

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]


def waiting_reason(pod: dict[str, object] | None) -> str:
    if pod is None:
        return ""
    status = pod.get("status")
    assert isinstance(status, dict)
    for c in status.get("containerStatuses") or []:
        waiting = (c.get("state") or {}).get("waiting") or {}
        if waiting.get("reason") == "CreateContainerError":
            return str(waiting.get("message", ""))
    return ""


def test_missing_mount_source_fails_the_container_until_fixed(bed: SimCluster, ns: str) -> None:
    node = bed.node(H100)
    library = node.library_path.read_bytes()
    node.library_path.unlink()
    try:
        docs = example("03-vgpu")
        apply(
            bed,
            ns,
            [
                find(docs, "ResourceClaimTemplate", "vgpu-3000mi-30"),
                pinned(find(docs, "Pod", "vgpu-3000mi-30"), H100),
            ],
        )
        message = wait_for(
            "CreateContainerError",
            lambda: waiting_reason(get_pod(bed.api, ns, "vgpu-3000mi-30")),
            timeout_s=30,
        )
        assert str(node.library_path) in message and "does not exist" in message
        pod = get_pod(bed.api, ns, "vgpu-3000mi-30")
        assert pod is not None and pod["status"]["phase"] == "Pending"
        assert runtime(bed, ns, pod).container("infer").error
    finally:
        node.library_path.write_bytes(library)
    pod = running(bed, ns, "vgpu-3000mi-30", timeout_s=30)  # the kubelet retries container creation
    assert not runtime(bed, ns, pod).container("infer").error
