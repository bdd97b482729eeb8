"""Restarting the node plugin while claims are prepared: nothing re-prepared wrongly, nothing leaked, and
new claims work."""

from __future__ import annotations

import pytest

from e2e.harness.examples import example, find, pinned
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, claim_of, container, running

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]


def test_restart_with_prepared_claims(bed: SimCluster, ns: str) -> None:
    vgpu, mig = example("03-vgpu"), example("06-first-available")
    apply(
        bed,
        ns,
        [
            find(vgpu, "ResourceClaimTemplate", "vgpu-3000mi-30"),
            find(mig, "ResourceClaimTemplate", "mig-or-vgpu"),
            pinned(find(vgpu, "Pod", "vgpu-3000mi-30"), H100, name="before-vgpu"),
            pinned(find(mig, "Pod", "mig-or-vgpu"), H100, name="before-mig"),
        ],
    )
    before = {name: running(bed, ns, name) for name in ("before-vgpu", "before-mig")}
    node = bed.node(H100)
    specs = {p.name: p.read_bytes() for p in node.cdi_specs()}
    dirs = [p.name for p in node.claim_dirs()]
    instances = node.mig_instances()
    statuses = {n: claim_of(bed, ns, p, "gpu")["status"]["devices"] for n, p in before.items()}
    assert len(specs) == 2 and len(dirs) == 1 and len(instances) == 1

    node.restart_plugin()

    assert {p.name: p.read_bytes() for p in node.cdi_specs()} == specs
    assert [p.name for p in node.claim_dirs()] == dirs
    assert node.mig_instances() == instances
    for name, pod in before.items():
        assert claim_of(bed, ns, pod, "gpu")["status"]["devices"] == statuses[name]

    apply(bed, ns, [pinned(find(mig, "Pod", "mig-or-vgpu"), H100, name="after-mig")])
    after = running(bed, ns, "after-mig")
    assert container(bed, ns, after, "main").cdi_devices
    assert len(node.mig_instances()) == 2
    assert len(node.cdi_specs()) == 3
