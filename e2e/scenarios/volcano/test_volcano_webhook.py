"""Volcano's own vGPU YAML and a HAMi pod, unchanged, in a cluster that runs Volcano: the webhook (the
chart's configuration, its default `--volcano auto`) sees Volcano's API served and keeps `schedulerName:
volcano`, so vc-scheduler allocates the converted claims and binds the pods, which run with their limits."""

from __future__ import annotations

import copy
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dra_driver.libtessera.names import HamiEnv
from dra_driver.vocabulary.names import Attr, Cap
from e2e.harness.kube import Json
from e2e.harness.testbed import SimCluster
from e2e.harness.webhook import RunningWebhook, helm_binary, start_webhook
from e2e.scenarios.probes import H100, apply, attribute, consumed, container, results
from e2e.scenarios.volcano.test_volcano_placement import placed_by_volcano
from e2e.volcano.config import SCHEDULER_NAME
from tests.support.smoke import covers

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(240)]

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples"
ENTRY = "tessera-gpu-0"  # the claim the conversion gives a pod's first GPU container


def example(name: str) -> Json:
    doc: Json = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


@pytest.fixture(scope="module")
def webhook(vbed: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningWebhook]:
    if helm_binary() is None:
        pytest.skip("no helm: run deploy/helm/build-helm.sh")
    log = tmp_path_factory.mktemp("webhook") / "webhook.log"
    # the chart's default, spelled out as docs/volcano.md names it
    running = start_webhook(
        vbed.api, vbed.kubectl, vbed.plane.kubeconfig, "tessera-admission-vc", log, args=("--volcano", "auto")
    )
    try:
        yield running
    finally:
        running.stop()


@covers("tessera webhook --volcano")
def test_volcanos_vgpu_pod_keeps_its_scheduler_and_gets_its_memory(
    vbed: SimCluster, vns: str, webhook: RunningWebhook
) -> None:
    apply(vbed, vns, [example("volcano-vgpu.yaml")])  # volcano.sh/vgpu-number: 1, vgpu-memory: 1024
    pod = placed_by_volcano(vbed, vns, "test1")
    (r,) = results(vbed, vns, pod, ENTRY)
    assert attribute(vbed, H100, r["device"], Attr.TYPE) == "vgpu"
    assert consumed(r, Cap.MEMORY) == "1Gi"
    env = container(vbed, vns, pod, "pod1-ctr").env_map()
    assert env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == "1024m"


def test_a_hami_pod_for_volcano_gets_two_gpus_with_their_limits(
    vbed: SimCluster, vns: str, webhook: RunningWebhook
) -> None:
    hami = copy.deepcopy(example("hami-default-use.yaml"))  # 2 GPUs, 3000 MiB and 30 % each
    hami["spec"]["schedulerName"] = SCHEDULER_NAME
    apply(vbed, vns, [hami])
    pod = placed_by_volcano(vbed, vns, "gpu-pod")
    found = results(vbed, vns, pod, ENTRY)
    assert len(found) == 2 and len({r["device"] for r in found}) == 2
    assert all(consumed(r, Cap.MEMORY) == "3000Mi" and consumed(r, Cap.CORES) == "30" for r in found)
    env = container(vbed, vns, pod, "ubuntu-container").env_map()
    assert env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}1"] == "3000m"
    assert env[f"{HamiEnv.SM_LIMIT_PREFIX}0"] == env[f"{HamiEnv.SM_LIMIT_PREFIX}1"] == "30"
