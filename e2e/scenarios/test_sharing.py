"""One claim for two containers and two pods; a firstAvailable claim; the extended-resource form."""

from __future__ import annotations

import pytest

from dra_driver.libtessera.names import HamiEnv
from dra_driver.vocabulary.names import Attr
from e2e.harness.examples import example, find, pinned
from e2e.harness.kube import get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, MIXED, apply, attribute, claim_of, container, results, running

pytestmark = pytest.mark.e2e


@pytest.mark.mixes_families
def test_one_claim_shared_by_two_containers_and_two_pods(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, example("05-shared-claim"))
    first = running(bed, ns, "shared-two-containers")
    second = running(bed, ns, "shared-second-pod")
    assert first["spec"]["nodeName"] == second["spec"]["nodeName"]
    producer = container(bed, ns, first, "producer")
    consumer = container(bed, ns, first, "consumer")
    main = container(bed, ns, second, "main")
    assert producer.cdi_devices == consumer.cdi_devices == main.cdi_devices
    assert producer.env_map()[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == "8192m"
    assert producer.env_map() == main.env_map()
    claim = claim_of(bed, ns, first, "gpu")
    assert {r["uid"] for r in claim["status"]["reservedFor"]} == {
        first["metadata"]["uid"],
        second["metadata"]["uid"],
    }

    node = bed.node_of(first)
    uid = claim["metadata"]["uid"]
    assert [p for p in node.cdi_specs() if uid in p.name]
    bed.kubectl.run("delete", "pod", "shared-two-containers", f"--namespace={ns}", "--wait=true")
    wait_for(
        "the first pod to go", lambda: get_pod(bed.api, ns, "shared-two-containers") is None, timeout_s=30
    )
    assert [p for p in node.cdi_specs() if uid in p.name], "unprepared while the second pod still uses it"
    bed.kubectl.run("delete", "pod", "shared-second-pod", f"--namespace={ns}", "--wait=true")
    wait_for(
        "the claim to be unprepared", lambda: not [p for p in node.cdi_specs() if uid in p.name], timeout_s=30
    )


@pytest.mark.mixes_families
def test_first_available_prefers_mig_then_falls_back_to_vgpu(bed: SimCluster, ns: str) -> None:
    docs = example("06-first-available")
    template, pod = find(docs, "ResourceClaimTemplate", "mig-or-vgpu"), find(docs, "Pod", "mig-or-vgpu")
    apply(bed, ns, [template, pinned(pod, H100, name="on-h100"), pinned(pod, MIXED, name="on-mixed")])
    on_h100 = running(bed, ns, "on-h100")
    (r,) = results(bed, ns, on_h100, "gpu")
    assert r["request"] == "gpu/mig"
    assert attribute(bed, H100, r["device"], Attr.PROFILE) == "1g.10gb"
    assert any(p.startswith("/dev/nvidia-caps/") for p in container(bed, ns, on_h100, "main").device_paths())

    on_mixed = running(bed, ns, "on-mixed")  # A100 with MIG off and L4: no MIG there
    (r,) = results(bed, ns, on_mixed, "gpu")
    assert r["request"] == "gpu/vgpu"
    env = container(bed, ns, on_mixed, "main").env_map()
    assert env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == "10240m" and env[f"{HamiEnv.SM_LIMIT_PREFIX}0"] == "15"


def test_extended_resource_name_instead_of_a_claim(bed: SimCluster, ns: str) -> None:
    apply(bed, ns, example("07-extended-resource"))
    pod = running(bed, ns, "extended-resource")
    extended = pod["status"].get("extendedResourceClaimStatus") or {}
    assert extended.get("resourceClaimName"), pod["status"]
    mappings = extended["requestMappings"]
    assert [(m["containerName"], m["resourceName"]) for m in mappings] == [("main", "gpu.tessera.dev/gpu")]
    main = container(bed, ns, pod, "main")
    assert len(main.cdi_devices) == 1
    assert any(p.startswith("/dev/nvidia") and p[len("/dev/nvidia") :].isdigit() for p in main.device_paths())
