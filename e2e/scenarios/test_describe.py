"""`kubectl describe resourceclaim` shows the allocation, and status.devices carries what the plugin wrote:
the limits of a slice and the UUID of a MIG instance."""

from __future__ import annotations

import pytest

from e2e.harness.examples import example, find, pinned
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, claim_of, running

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]


def test_describe_shows_device_limits_and_mig_uuid(bed: SimCluster, ns: str) -> None:
    vgpu, mig = example("03-vgpu"), example("06-first-available")
    apply(
        bed,
        ns,
        [
            find(vgpu, "ResourceClaimTemplate", "vgpu-3000mi-30"),
            find(mig, "ResourceClaimTemplate", "mig-or-vgpu"),
            pinned(find(vgpu, "Pod", "vgpu-3000mi-30"), H100, name="slice"),
            pinned(find(mig, "Pod", "mig-or-vgpu"), H100, name="mig"),
        ],
    )
    slice_claim = claim_of(bed, ns, running(bed, ns, "slice"), "gpu")
    mig_claim = claim_of(bed, ns, running(bed, ns, "mig"), "gpu")

    (status,) = slice_claim["status"]["devices"]
    assert status["driver"] == "gpu.tessera.dev"
    assert status["data"]["limits"] == {"memory": "3000Mi", "cores": 30}
    assert any(c["type"] == "Ready" and c["status"] == "True" for c in status["conditions"])
    (mig_status,) = mig_claim["status"]["devices"]
    mig_uuid = mig_status["data"]["migUUID"]
    assert mig_uuid.startswith("MIG-") and mig_uuid in {m for _, m in bed.node(H100).mig_instances()}

    text = bed.kubectl.run("describe", "resourceclaim", slice_claim["metadata"]["name"], f"--namespace={ns}")
    device = slice_claim["status"]["allocation"]["devices"]["results"][0]["device"]
    assert device in text and "gpu.tessera.dev" in text and "3000Mi" in text
    text = bed.kubectl.run("describe", "resourceclaim", mig_claim["metadata"]["name"], f"--namespace={ns}")
    assert mig_uuid in text
