"""A live vGPU slice keeps its GPU from whole-GPU and MIG use; the scheduler goes elsewhere, and once the
slice is gone the GPU can be had whole again."""

from __future__ import annotations

from typing import Any

import pytest

from dra_driver.vocabulary.names import Attr, Cap
from e2e.harness.examples import example, find, pinned, renamed
from e2e.harness.kube import Json, get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, MIXED, apply, attribute, results, running, stays_pending

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

MEMORY, CORES = Cap.MEMORY, Cap.CORES


def template(name: str, device_class: str, cel: str, capacity: dict[str, str] | None = None) -> Json:
    exactly: dict[str, Any] = {"deviceClassName": device_class, "selectors": [{"cel": {"expression": cel}}]}
    if capacity:
        exactly["capacity"] = {"requests": capacity}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": exactly}]}}},
    }


def pod(name: str, claim_template: str, node: str) -> Json:
    base = find(example("03-vgpu"), "Pod", "vgpu-3000mi-30")
    out = pinned(renamed(base, name), node)
    out["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = claim_template
    return out


def uuid_is(uuid: str) -> str:
    return f'device.attributes["gpu.tessera.dev"].{Attr.UUID} == "{uuid}"'


def parent_is(uuid: str) -> str:
    return f'device.attributes["gpu.tessera.dev"].{Attr.PARENT_UUID} == "{uuid}"'


def test_vgpu_slice_blocks_whole_and_mig_use_of_its_gpu(bed: SimCluster, ns: str) -> None:
    gpu0 = str(attribute(bed, H100, "gpu-0", Attr.UUID))
    apply(
        bed,
        ns,
        [template("slice-on-gpu0", "vgpu.tessera.dev", parent_is(gpu0), {MEMORY: "1Gi", CORES: "10"})],
    )
    apply(bed, ns, [pod("slice", "slice-on-gpu0", H100)])
    (r,) = results(bed, ns, running(bed, ns, "slice"), "gpu")
    assert r["device"] == "gpu-0-vgpu"

    # First fit would take GPU 0 for both; its counters are held by the slice.
    apply(
        bed,
        ns,
        [
            template("any-whole", "gpu.tessera.dev", "true"),
            template("any-mig", "mig-1g.10gb.gpu.tessera.dev", "true"),
        ],
    )
    apply(bed, ns, [pod("whole", "any-whole", H100), pod("mig", "any-mig", H100)])
    (whole,) = results(bed, ns, running(bed, ns, "whole"), "gpu")
    (mig,) = results(bed, ns, running(bed, ns, "mig"), "gpu")
    assert whole["device"] != "gpu-0"
    assert attribute(bed, H100, mig["device"], Attr.PARENT_UUID) != gpu0

    # Asking for GPU 0 whole must wait for the slice to go, then succeed.
    apply(bed, ns, [template("gpu0-whole", "gpu.tessera.dev", uuid_is(gpu0))])
    apply(bed, ns, [pod("gpu0-whole", "gpu0-whole", H100)])
    stays_pending(bed, ns, "gpu0-whole", seconds=3)
    bed.kubectl.run("delete", "pod", "slice", f"--namespace={ns}", "--wait=true")
    (r,) = results(bed, ns, running(bed, ns, "gpu0-whole"), "gpu")
    assert r["device"] == "gpu-0"


def test_whole_gpus_exhausted_while_a_slice_lives(bed: SimCluster, ns: str) -> None:
    a100 = 'device.attributes["gpu.tessera.dev"].productName.contains("A100")'
    gpu0 = str(attribute(bed, MIXED, "gpu-0", Attr.UUID))
    apply(
        bed,
        ns,
        [
            template("a100-slice", "vgpu.tessera.dev", parent_is(gpu0), {MEMORY: "2Gi", CORES: "20"}),
            template("a100-whole", "gpu.tessera.dev", a100),
        ],
    )
    apply(bed, ns, [pod("slice", "a100-slice", MIXED)])
    running(bed, ns, "slice")
    apply(bed, ns, [pod("whole-1", "a100-whole", MIXED)])
    (r,) = results(bed, ns, running(bed, ns, "whole-1"), "gpu")
    assert r["device"] == "gpu-1"  # GPU 0 carries the slice
    apply(bed, ns, [pod("whole-2", "a100-whole", MIXED)])
    stays_pending(bed, ns, "whole-2", seconds=3)
    bed.kubectl.run("delete", "pod", "slice", f"--namespace={ns}", "--wait=true")
    wait_for("slice to go", lambda: get_pod(bed.api, ns, "slice") is None, timeout_s=30)
    (r,) = results(bed, ns, running(bed, ns, "whole-2"), "gpu")
    assert r["device"] == "gpu-0"
