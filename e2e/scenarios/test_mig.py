"""MIG on simulated H100s: four instances of one GPU created at prepare, gone after the pod."""

from __future__ import annotations

import pytest

from dra_driver.vocabulary.names import Attr
from e2e.harness.examples import example, find, pinned
from e2e.harness.kube import get_pod, wait_for
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, attribute, claim_of, container, results, running

pytestmark = pytest.mark.e2e


def test_mig_instances_live_exactly_as_long_as_the_pod(bed: SimCluster, ns: str) -> None:
    docs = example("04-mig")
    apply(
        bed, ns, [find(docs, "ResourceClaimTemplate", "mig-mix"), pinned(find(docs, "Pod", "mig-mix"), H100)]
    )
    pod = running(bed, ns, "mig-mix")
    allocated = {r["request"]: r for r in results(bed, ns, pod, "mig")}
    assert sorted(allocated) == ["large", "medium", "small-a", "small-b"]
    profiles = {req: attribute(bed, H100, r["device"], Attr.PROFILE) for req, r in allocated.items()}
    assert profiles == {"small-a": "1g.10gb", "small-b": "1g.10gb", "medium": "2g.20gb", "large": "3g.40gb"}
    parents = {attribute(bed, H100, r["device"], Attr.PARENT_UUID) for r in allocated.values()}
    assert len(parents) == 1  # matchAttribute on parentUUID

    node = bed.node(H100)
    instances = node.mig_instances()
    assert len(instances) == 4 and {gpu for gpu, _ in instances} == parents
    statuses = claim_of(bed, ns, pod, "mig")["status"].get("devices") or []
    mig_uuids = {s["data"]["migUUID"] for s in statuses}
    assert mig_uuids == {mig for _, mig in instances}

    caps: list[set[str]] = []
    for name in allocated:
        nodes = container(bed, ns, pod, name).device_paths()
        caps.append({p for p in nodes if p.startswith("/dev/nvidia-caps/")})
    assert all(len(c) == 2 for c in caps)  # each container: its GPU and compute instance
    assert len(set().union(*caps)) == 8  # and no container sees another's instance

    bed.kubectl.run("delete", "pod", "mig-mix", f"--namespace={ns}", "--wait=true")
    wait_for("mig-mix to go", lambda: get_pod(bed.api, ns, "mig-mix") is None, timeout_s=30)
    assert node.mig_instances() == []
