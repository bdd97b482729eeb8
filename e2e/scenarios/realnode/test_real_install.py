"""The chart as installed on the real node: its plugin runs only in the DaemonSet's container (our image, no
process of Tessera's on the host outside a container), is Ready because it is registered and published, and
the commands the chart's NOTES print work as written."""

from __future__ import annotations

import shlex

import pytest

from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.harness.testbed import SimCluster
from e2e.realnode.chart import IMAGE_REPOSITORY, RELEASE
from e2e.realnode.node import RealNode

pytestmark = [pytest.mark.e2e, pytest.mark.realnode]


def test_the_plugin_runs_from_our_image_in_the_charts_pod(real_node: RealNode) -> None:
    pod = real_node.chart.current
    assert pod.registrations() >= 1
    pid = real_node.chart.process_of(pod)
    assert pid is not None
    # the process runs in a container of the node: its root is the image's, not the machine's
    root = f"/proc/{pid}/root"
    with open(f"{root}/usr/local/bin/tessera", "rb") as launcher:
        assert launcher.read(2) == b"#!"
    with open(f"/proc/{pid}/cgroup") as cgroup:
        assert real_node.cgroup_root in cgroup.read()
    images = real_node.images()
    assert f"{IMAGE_REPOSITORY}:{real_node.chart.image_tag}" in images


def test_the_notes_commands_work_as_written(bed: SimCluster, real_node: RealNode) -> None:
    notes = real_node.chart.helm("get", "notes", RELEASE, "--namespace", SYSTEM_NS).stdout
    commands = [line.strip() for line in notes.splitlines() if line.strip().startswith("kubectl ")]
    runnable = [c for c in commands if "<" not in c]  # the others name the user's own objects
    assert len(runnable) >= 3, notes
    outputs = {c: bed.kubectl.run(*shlex.split(c)[1:]) for c in runnable}
    slices = next(out for c, out in outputs.items() if "resourceslices" in c)
    assert real_node.name in slices
    plugin_pods = next(out for c, out in outputs.items() if "component=node-plugin" in c)
    assert real_node.chart.current.name in plugin_pods
