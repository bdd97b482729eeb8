"""A seamless plugin upgrade with the real kubelet through `helm upgrade` (e2e.realnode.upgrade): a new image
tag, then a settings change, each rolled by the DaemonSet (new pod beside the old one, the old one gone once
the new one is Ready), while pods keep being created and deleted; no prepare or unprepare fails, every pod
runs and is finalized, and nothing is left behind (no CDI spec, claim dir, checkpoint entry, or socket of an
old pod).

It runs `make bench-upgrade`'s body (`report_upgrade`, its figures printed) on this folder's node: the bench
adds only a plane and a node of its own around it, whose start every real-node scenario runs already; its
recipe is checked to call that body."""

from __future__ import annotations

import subprocess
import sys

import pytest
import structlog

from e2e.realnode.__main__ import report_upgrade
from e2e.realnode.node import RealNode
from tests.support.smoke import MADE_BY_MAKE_TEST, REPO, covers, lines_with, make_env

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]
log = structlog.get_logger(__name__)


def test_the_bench_recipe_runs_the_upgrade_body() -> None:
    old = [flag for name in MADE_BY_MAKE_TEST for flag in ("-o", name)]
    recipe = subprocess.run(
        ["make", "--no-print-directory", "-n", *old, "bench-upgrade", "SMOKE=1"],
        cwd=REPO,
        env=make_env(),
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "-m e2e.realnode upgrade --smoke" in recipe, recipe
    usage = subprocess.run(
        [sys.executable, "-m", "e2e.realnode", "upgrade", "--help"],
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert "--warmup-pods" in usage and "--smoke" in usage, usage


@covers("make bench-upgrade")
def test_seamless_upgrade_under_a_stream_of_pods(
    real_node: RealNode, real_ns: str, capsys: pytest.CaptureFixture[str]
) -> None:
    old = real_node.chart.current.uid
    figures = report_upgrade(real_node, real_ns, workers=3, warmup_pods=4, after_pods=4)
    printed = capsys.readouterr().out
    missing = lines_with(
        printed,
        "installed with helm in",
        "3 workers create/delete vgpu pods; `helm upgrade` twice",
        "  pods_created ",
        "  switch_s ",
        "  leftovers ",
    )
    assert missing == [], printed
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
