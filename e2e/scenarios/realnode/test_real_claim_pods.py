"""The per-claim metrics of the helm-installed plugin name the claims' pods (issue #36: every series had
pod="" although each claim's status.reservedFor named its pod). Two pods, a vgpu slice and a whole GPU: the
first scrape once each pod runs carries its name."""

from __future__ import annotations

import urllib.request

import pytest
from prometheus_client.parser import text_string_to_metric_families

from e2e.harness.testbed import SimCluster
from e2e.realnode.node import RealNode
from e2e.realnode.workloads import ProbeContainer, claim_template, probe_pod, vgpu, whole_gpu

from .helpers import apply, claim_of, running

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def scrape(port: int) -> dict[str, set[str]]:
    """claim UID → the `pod` labels of its tessera_claim_memory_limit_bytes series."""
    with urllib.request.urlopen(f"http://127.0.0.1:{port}/metrics", timeout=10) as r:
        text = r.read().decode()
    found: dict[str, set[str]] = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == "tessera_claim_memory_limit_bytes":
                found.setdefault(s.labels["uid"], set()).add(s.labels["pod"])
    return found


def test_claim_series_name_their_pod_at_the_first_scrape(
    bed: SimCluster, real_node: RealNode, real_ns: str
) -> None:
    apply(
        bed,
        real_ns,
        [
            claim_template("slice", vgpu("2000Mi", "20")),
            claim_template("whole", whole_gpu()),
            probe_pod(
                "sliced",
                node=real_node.name,
                templates={"gpu": "slice"},
                containers=[ProbeContainer("cuda", ("hold", "100"), claims=("gpu",))],
            ),
            probe_pod(
                "exclusive",
                node=real_node.name,
                templates={"gpu": "whole"},
                containers=[ProbeContainer("cuda", ("fill",), claims=("gpu",))],
            ),
        ],
    )
    pods = {name: running(real_node, real_ns, name) for name in ("sliced", "exclusive")}
    series = scrape(real_node.metrics_port)
    for name, pod in pods.items():
        uid = claim_of(real_node, real_ns, pod, "gpu")["metadata"]["uid"]
        assert series.get(uid) == {name}, (name, series)
