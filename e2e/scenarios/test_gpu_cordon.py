"""Cordon, drain and uncordon one GPU (`tessera gpu …`, docs/operations.md) against the real control plane.

A node of its own (3 simulated H100s, its plugin reading its Node every 10 s as it ships): `tessera gpu
cordon` taints every device of the GPU, the real scheduler puts new vgpu claims on the other GPUs and the
pod already there keeps running; `tessera gpu drain` makes it NoExecute and the real device-taint-eviction
controller evicts the pod of a Deployment there, whose replacement lands on another GPU; the cordon survives
a plugin restart; `tessera gpu uncordon` lifts it and new claims come back. The node's /metrics and
`tessera explain` name the cordon.
"""

from __future__ import annotations

import subprocess
import sys
import tempfile
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from dra_driver.vocabulary.names import CORDON_ANNOTATION
from e2e.controlplane.settings import RELEASE
from e2e.harness.examples import pinned
from e2e.harness.kube import Json, get_pod, wait_for
from e2e.harness.node import NODES_DIR, REPO_ROOT, SimNode
from e2e.harness.testbed import SimCluster, start_node
from e2e.scenarios.probes import apply, results, running
from kubelet_plugin.node.events import EVENT_NAMESPACE
from kubelet_plugin.node.gpu_cordons import CORDON_REASON
from tests.support.smoke import covers

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

NODE = "sim-cordon-h100x3"
TESSERA = Path(sys.executable).with_name("tessera")
DEVICES_PER_GPU = 28 if RELEASE.mixes_families() else 26
WAIT = "--wait=60"  # the plugin reads its Node every 10 s


@pytest.fixture(scope="module")
def cordon_node(bed: SimCluster) -> Iterator[SimNode]:
    spec = yaml.safe_load((NODES_DIR / "h100x8.yaml").read_text())
    spec = {**spec, "nodeName": NODE, "gpus": [{"product": "H100-80GB-SXM", "count": 3, "migEnabled": False}]}
    root = Path(tempfile.mkdtemp(prefix="tessera-e2e-cordon-"))
    node_file = root / "node.yaml"
    node_file.write_text(yaml.safe_dump(spec))
    node = start_node(bed, node_file, root=root / "n")
    try:
        yield node
    finally:
        node.stop()  # deletes the Node, its cordons with it
        bed.nodes.pop(node.name, None)


def tessera(bed: SimCluster, *args: str, code: int = 0) -> str:
    done = subprocess.run(
        [str(TESSERA), *args, f"--kubeconfig={bed.plane.kubeconfig}"],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == code, (done.returncode, done.stdout, done.stderr)
    if code == 0 and args[0] == "gpu":  # data on stdout, nothing else; log lines (if any) on stderr
        assert done.stdout.startswith(("node ", "gpu-", NODE)) or not done.stdout, done.stdout
    return done.stdout + done.stderr


def cordon_values(node: SimNode, gpu: int) -> list[tuple[str, str]]:
    """(value, effect) of the cordon taint of each published device of GPU `gpu` ('', '' for none)."""
    out = []
    for s in node.slices():
        for d in s["spec"].get("devices") or []:
            if d["name"] == f"gpu-{gpu}" or d["name"].startswith(f"gpu-{gpu}-"):
                marks = [(t.get("value", ""), t["effect"]) for t in d.get("taints") or []]
                out.extend(marks or [("", "")])
    assert len(out) == DEVICES_PER_GPU, out
    return out


def vgpu_template(name: str) -> Json:
    request = {
        "name": "gpu",
        "exactly": {
            "deviceClassName": "vgpu.tessera.dev",
            "capacity": {"requests": {"memory": "4Gi", "cores": "10"}},
        },
    }
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [request]}}},
    }


def pod_spec(template: str) -> Json:
    return {
        "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": template}],
        "containers": [
            {
                "name": "serve",
                "image": "busybox",
                "command": ["sleep", "infinity"],
                "resources": {"claims": [{"name": "gpu"}]},
            }
        ],
    }


def vgpu_pod(name: str) -> Json:
    pod: Json = {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": pod_spec("slice")}
    return pinned(pod, NODE)


def deployment(name: str) -> Json:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": name},
        "spec": {
            "replicas": 1,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {**pod_spec("slice"), "nodeSelector": {"kubernetes.io/hostname": NODE}},
            },
        },
    }


def gpu_of(bed: SimCluster, ns: str, pod: Json) -> int:
    (result,) = results(bed, ns, pod, "gpu")
    return int(str(result["device"]).split("-")[1])


def the_pod_of(bed: SimCluster, ns: str, app: str) -> Json | None:
    pods: list[Any] = k8s.CoreV1Api(bed.api).list_namespaced_pod(ns, label_selector=f"app={app}").items
    live = [p for p in pods if p.metadata.deletion_timestamp is None and p.spec.node_name]
    if len(live) != 1:
        return None
    return running(bed, ns, str(live[0].metadata.name))


def metric(node: SimNode, gpu: int) -> str:
    with urllib.request.urlopen(node.metrics_url, timeout=10) as r:
        text: str = r.read().decode()
    (line,) = [x for x in text.splitlines() if x.startswith(f'tessera_gpu_cordoned{{gpu="{gpu}",')]
    return line.rsplit(" ", 1)[1]


@pytest.mark.timeout(600)  # three waits for the plugin's 10 s read of its Node, a restart, an eviction
@covers(
    "tessera gpu cordon NODE gpu-0 --wait 60",
    "tessera gpu drain NODE gpu-1 --wait 60",
    "tessera gpu uncordon NODE gpu-0 --wait 60",
    "tessera gpu list",
    "tessera gpu list NODE",
)
def test_cordon_keeps_new_claims_off_drain_moves_the_pod_uncordon_brings_them_back(
    bed: SimCluster, cordon_node: SimNode, ns: str, tmp_path: Path
) -> None:
    apply(bed, ns, [vgpu_template("slice")])
    # first fit: without a cordon the scheduler gives the first claim a share of gpu-0
    apply(bed, ns, [vgpu_pod("before")])
    assert gpu_of(bed, ns, running(bed, ns, "before")) == 0
    node: Any = k8s.CoreV1Api(bed.api).read_node(NODE)
    assert CORDON_ANNOTATION not in (node.metadata.annotations or {})

    said = tessera(bed, "gpu", "cordon", NODE, "gpu-0", WAIT)
    assert "gpu-0 cordoned (NoSchedule)" in said
    assert set(cordon_values(cordon_node, 0)) == {("cordon", "NoSchedule")}
    assert set(cordon_values(cordon_node, 1)) == {("", "")}
    assert metric(cordon_node, 0) == "1" and metric(cordon_node, 1) == "0"
    events = k8s.CoreV1Api(bed.api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={NODE},reason={CORDON_REASON}"
    )
    assert any("gpu-0 cordoned" in str(e.message) for e in events.items)
    assert f"{NODE}\tgpu-0\tNoSchedule" in tessera(bed, "gpu", "list")

    # a cordon keeps what runs: the first pod stays; new claims go to the other GPUs
    apply(bed, ns, [vgpu_pod("after")])
    assert gpu_of(bed, ns, running(bed, ns, "after")) == 1
    assert get_pod(bed.api, ns, "before") is not None
    claim_file = tmp_path / "claim.yaml"
    claim_file.write_text(yaml.safe_dump(vgpu_template("slice")))
    explained = tessera(bed, "explain", str(claim_file), f"--node={NODE}", "--verbose")
    assert f"`tessera gpu uncordon {NODE} gpu-0` lifts it" in explained

    # drain gpu-1: the Deployment's pod there is evicted and its replacement lands on gpu-2
    apply(bed, ns, [deployment("serve")])
    first = wait_for("the Deployment's pod running", lambda: the_pod_of(bed, ns, "serve"), timeout_s=90)
    assert gpu_of(bed, ns, first) == 1
    assert "gpu-1 drained (NoExecute)" in tessera(bed, "gpu", "drain", NODE, "gpu-1", WAIT)
    assert set(cordon_values(cordon_node, 1)) == {("drain", "NoExecute")}
    wait_for("the pod on gpu-1 evicted", lambda: get_pod(bed.api, ns, "after") is None, timeout_s=90)
    replacement = wait_for(
        "the replacement running elsewhere",
        lambda: (
            (p := the_pod_of(bed, ns, "serve")) and p["metadata"]["name"] != first["metadata"]["name"] and p
        ),
        timeout_s=120,
    )
    assert gpu_of(bed, ns, replacement) == 2

    # the cordons are the Node's: a restarted plugin publishes them again from the first slices on
    cordon_node.restart_plugin()
    assert set(cordon_values(cordon_node, 0)) == {("cordon", "NoSchedule")}
    assert set(cordon_values(cordon_node, 1)) == {("drain", "NoExecute")}

    # uncordon: gpu-0 takes new claims again
    assert "gpu-0 uncordoned" in tessera(bed, "gpu", "uncordon", NODE, "gpu-0", WAIT)
    assert set(cordon_values(cordon_node, 0)) == {("", "")}
    apply(bed, ns, [vgpu_pod("back")])
    assert gpu_of(bed, ns, running(bed, ns, "back")) == 0
    tessera(bed, "gpu", "uncordon", NODE, "gpu-1", WAIT)
    assert metric(cordon_node, 1) == "0"


def test_a_gpu_the_node_does_not_have_is_refused_naming_the_list_command(
    bed: SimCluster, cordon_node: SimNode
) -> None:
    said = tessera(bed, "gpu", "cordon", NODE, "gpu-7", code=2)
    assert f"node {NODE} publishes no device of gpu-7" in said and f"tessera gpu list {NODE}" in said
    assert "does not exist" in tessera(bed, "gpu", "drain", "no-such-node", "gpu-0", code=2)
    listed = tessera(bed, "gpu", "list", NODE)
    assert listed.splitlines()[:3] == [
        "gpu-0\tcordon=-\tpublished=-",
        "gpu-1\tcordon=-\tpublished=-",
        "gpu-2\tcordon=-\tpublished=-",
    ]
