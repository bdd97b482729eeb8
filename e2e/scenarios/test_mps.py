"""MPS shares: two claims (30 % and 70 %) on one GPU with the real scheduler, the per-client variables each
container gets, the GPU's MPS control daemon started for the first claim and stopped after the last, and a
whole-GPU claim kept off that GPU meanwhile."""

from __future__ import annotations

import pytest
from kubernetes import client as k8s

from dra_driver.core.families.mps import (
    PINNED_MEMORY_ENV,
    PIPE_DIRECTORY_ENV,
    THREAD_PERCENTAGE_ENV,
    container_pipe_dir,
)
from dra_driver.libtessera.names import CONTAINER_LIBRARY_PATH, LIMITS_FILE_NAME
from dra_driver.vocabulary.names import Attr, Cap, ClaimUID, GpuUUID
from e2e.harness.examples import example, find, pinned, renamed
from e2e.harness.kube import Json, get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import (
    H100,
    apply,
    attribute,
    claim_of,
    consumed,
    container,
    results,
    running,
    stays_pending,
)
from kubelet_plugin.host_parts.mps.control import MpsControl
from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL, mps_dir_for

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]


def mps_docs(node: str) -> list[Json]:
    docs = example("08-mps")
    out = [find(docs, "ResourceClaimTemplate", "mps-30"), find(docs, "ResourceClaimTemplate", "mps-70")]
    out += [pinned(find(docs, "Pod", name), node) for name in ("mps-30", "mps-70")]
    return out


def whole_gpu_on(uuid: str, node: str) -> list[Json]:
    selector = f'device.attributes["gpu.tessera.dev"].{Attr.UUID} == "{uuid}"'
    template = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "whole-gpu0"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "gpu.tessera.dev",
                                "selectors": [{"cel": {"expression": selector}}],
                            },
                        }
                    ]
                }
            }
        },
    }
    pod = pinned(renamed(find(example("08-mps"), "Pod", "mps-30"), "whole"), node)
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "whole-gpu0"
    return [template, pod]


def daemons(bed: SimCluster, node: str) -> dict[GpuUUID, bool]:
    """GPU → whether its MPS control daemon answers, as the node's plugin would find them."""
    control = MpsControl(root=mps_dir_for(bed.node(node).root), tool=str(FAKE_MPS_CONTROL))
    return {s.gpu_uuid: s.answering for s in control.running()}


def test_two_mps_claims_share_one_gpu_concurrently_and_keep_whole_gpu_use_off_it(
    bed: SimCluster, ns: str
) -> None:
    gpu0 = GpuUUID(str(attribute(bed, H100, "gpu-0", Attr.UUID)))
    assert attribute(bed, H100, "gpu-0-mps", Attr.TYPE) == "mps"
    # One after the other: a pod scheduled while the other's allocation of the same shared device is still in
    # flight may be sent to the next GPU (seen once on 1.37.2); first fit is what this scenario checks.
    docs = mps_docs(H100)
    pods = {}
    for name in ("mps-30", "mps-70"):
        apply(bed, ns, [d for d in docs if d["metadata"]["name"] == name])
        pods[name] = running(bed, ns, name)
    for name, cores, memory in (("mps-30", "30", 20 << 10), ("mps-70", "70", 40 << 10)):
        (r,) = results(bed, ns, pods[name], "gpu")
        assert r["device"] == "gpu-0-mps" and consumed(r, Cap.CORES) == cores  # first fit: both on GPU 0
        env = container(bed, ns, pods[name], "infer").env_map()
        assert env[THREAD_PERCENTAGE_ENV] == cores
        assert env[PINNED_MEMORY_ENV] == f"0={memory}M"
        assert env[PIPE_DIRECTORY_ENV] == container_pipe_dir(gpu0)
        assert env["LD_PRELOAD"] == CONTAINER_LIBRARY_PATH  # exact memory accounting across the claim
        pipe = container(bed, ns, pods[name], "infer").mount_at(container_pipe_dir(gpu0))
        uid = ClaimUID(claim_of(bed, ns, pods[name], "gpu")["metadata"]["uid"])
        # the claim's own directory with a link to the control socket, read-only: never the pipe directory
        assert pipe is not None and pipe.host_path.endswith(f"/{gpu0}/clients/{uid}") and pipe.read_only
        limits = (bed.node(H100).claims_dir / uid / LIMITS_FILE_NAME).read_text()
        assert f"gpu {gpu0} memory {memory << 20} cores 0 " in limits  # MPS divides the SMs, not the library
        status = claim_of(bed, ns, pods[name], "gpu")["status"]["devices"][0]["data"]
        assert status["limits"] == {"memory": f"{memory}Mi", "cores": int(cores)}
    assert daemons(bed, H100) == {gpu0: True}  # one daemon for the GPU, both claims its clients

    # the shares hold GPU 0's counters: a whole GPU 0 cannot be allocated while they live
    apply(bed, ns, whole_gpu_on(gpu0, H100))
    stays_pending(bed, ns, "whole", seconds=5)

    core = k8s.CoreV1Api(bed.api)
    core.delete_namespaced_pod("mps-30", ns)
    wait_for("mps-30 to go", lambda: get_pod(bed.api, ns, "mps-30") is None, timeout_s=60)
    assert daemons(bed, H100) == {gpu0: True}  # mps-70 still uses it
    core.delete_namespaced_pod("mps-70", ns)
    wait_for("mps-70 to go", lambda: get_pod(bed.api, ns, "mps-70") is None, timeout_s=60)
    wait_for("the GPU's MPS daemon to stop", lambda: daemons(bed, H100) == {}, timeout_s=30)

    (r,) = results(bed, ns, running(bed, ns, "whole"), "gpu")
    assert r["device"] == "gpu-0"
