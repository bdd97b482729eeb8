"""A seamless plugin upgrade with the real kubelet through `helm upgrade` (e2e.realnode.upgrade): a new image
tag, then a settings change, each rolled by the DaemonSet (new pod beside the old one, the old one gone once
the new one is Ready), while pods keep being created and deleted; no prepare or unprepare fails, every pod
runs and is finalized, and nothing is left behind (no CDI spec, claim dir, checkpoint entry, or socket of an
old pod)."""

from __future__ import annotations

import pytest
import structlog

from e2e.realnode.node import RealNode
from e2e.realnode.upgrade import run_upgrade

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
log = structlog.get_logger(__name__)


def test_seamless_upgrade_under_a_stream_of_pods(real_node: RealNode, real_ns: str) -> None:
    old = real_node.chart.current.uid
    figures = run_upgrade(real_node, real_ns)
    current = real_node.chart.current.uid
    assert current != old and len(real_node.chart.pods()) == 1
    assert len(figures.switch_s) == 2
    assert figures.failures == ()
    assert figures.pods_failed == 0
    assert figures.pods_created_during_switch > 0
    assert figures.pods_created_before > 0 and figures.pods_created_after > 0
    assert figures.kubelet_failed_prepares == 0 and figures.kubelet_failed_unprepares == 0
    assert figures.kubelet_failed_grpc_calls == 0
    assert figures.kubelet_prepares >= figures.pods_created - figures.pods_failed
    assert figures.plugin_claim_failures == 0
    assert figures.leftovers == ()
    # only the new instance's sockets remain
    assert all(old not in p.name for p in real_node.sockets())
    assert any(current in p.name for p in real_node.sockets())
