"""Guarantee and ceiling (docs/gpu-sharing.md): a claim template that asks for 30 % of the SMs with a ceiling
of 100 is prepared, its container gets both in its limits file, `kubectl describe resourceclaim` shows both,
and the node daemon's burst arbiter lets the claim, alone on its GPU, start at once up to its ceiling."""

from __future__ import annotations

import pytest

from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.libtessera.view_layout import Part
from dra_driver.vocabulary.names import CONFIG_API_VERSION, DRIVER_NAME, Attr, Cap
from e2e.harness.examples import example, find, renamed
from e2e.harness.kube import Json
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import (
    H100,
    apply,
    attribute,
    claim_of,
    consumed,
    pod_named,
    results,
    running,
    view_settles,
)

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]


def burst_template(name: str, cores: str, ceiling: int) -> Json:
    template = renamed(find(example("03-vgpu"), "ResourceClaimTemplate", "vgpu-3000mi-30"), name)
    devices = template["spec"]["spec"]["devices"]
    devices["requests"][0]["exactly"]["capacity"]["requests"][Cap.CORES] = cores
    devices["config"] = [
        {
            "requests": ["gpu"],
            "opaque": {
                "driver": DRIVER_NAME,
                "parameters": {"apiVersion": CONFIG_API_VERSION, "kind": "VgpuConfig", "coresLimit": ceiling},
            },
        }
    ]
    return template


def test_a_claim_with_a_ceiling_gets_guarantee_and_ceiling(bed: SimCluster, ns: str) -> None:
    pod = find(example("03-vgpu"), "Pod", "vgpu-3000mi-30")
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "burst-30-100"
    apply(bed, ns, [burst_template("burst-30-100", "30", 100), pod_named(pod, "burst", H100)])
    running_pod = running(bed, ns, "burst")
    claim = claim_of(bed, ns, running_pod, "gpu")
    (result,) = results(bed, ns, running_pod, "gpu")
    # the scheduler counts the guarantee only
    assert consumed(result, Cap.CORES) == "30"

    # the container's limits file: the guarantee and the ceiling (version 2: a line has a ceiling)
    uid = claim["metadata"]["uid"]
    limits = (bed.node(H100).claims_dir / uid / LIMITS_FILE_NAME).read_text()
    gpu_uuid = attribute(bed, H100, result["device"], Attr.UUID)
    assert limits.startswith("version 2\n")
    assert f"gpu {gpu_uuid} memory {3000 << 20} cores 30 priority 1 ceiling 100 slot 1 " in limits

    # what describe shows: status.devices[].data.limits with both
    (status,) = claim["status"]["devices"]
    assert status["data"]["limits"] == {"memory": "3000Mi", "cores": 30, "coresLimit": 100}
    text = bed.kubectl.run("describe", "resourceclaim", claim["metadata"]["name"], f"--namespace={ns}")
    assert "Cores Limit:" in text or "coresLimit" in text, text
    assert "100" in text

    # the daemon's arbiter: the claim is alone on its GPU, so it gets no part but starts at once up to 100 %
    assert view_settles(bed, H100, gpu_uuid, (Part(1, 0, 0, 100),)) == (50_000, (Part(1, 0, 0, 100),))
