"""Device health as DRA device taints, and usage in claim status, against the real control plane.

A node of its own (2 simulated H100s carrying the UUIDs the fake driver reports, health checked every second,
usage written every 2 s): a fault injected with `tessera sim inject` taints every device of that GPU in the
ResourceSlice; the real scheduler puts a new claim on the other GPU; a lost GPU (NoExecute) gets its pod
evicted by the real device-taint-eviction controller; the taint clears on recovery, while a fatal XID's holds
until the plugin restarts. A fake-driver program running in a vgpu claim's directory fills its region, and
`kubectl describe resourceclaim` shows the usage.
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

from dra_driver.vocabulary.names import DRIVER_NAME
from e2e.controlplane.settings import RELEASE
from e2e.harness.examples import pinned
from e2e.harness.kube import Json, get_pod, wait_for
from e2e.harness.node import NODES_DIR, REPO_ROOT, SimNode
from e2e.harness.testbed import SimCluster, start_node
from e2e.scenarios.probes import apply, claim_of, results, running
from kubelet_plugin.health.events import GPU_RECOVERED_REASON, GPU_UNHEALTHY_REASON
from kubelet_plugin.node.events import EVENT_NAMESPACE
from tests.support.doubles.interceptor_programs import TCUDA, container_view, env, start

pytestmark = pytest.mark.e2e

NODE = "sim-health-h100x2"
MiB = 1 << 20
# an H100: whole, vgpu, MPS and 25 MIG placements; without vgpu and MPS where the release cannot mix them
DEVICES_PER_GPU = 28 if RELEASE.mixes_families() else 26


@pytest.fixture(scope="module")
def health_node(bed: SimCluster) -> Iterator[SimNode]:
    spec = yaml.safe_load((NODES_DIR / "realnode-h100x2.yaml").read_text())
    root = Path(tempfile.mkdtemp(prefix="tessera-e2e-health-"))
    node_file = root / "node.yaml"
    node_file.write_text(yaml.safe_dump({**spec, "nodeName": NODE}))
    node = start_node(
        bed,
        node_file,
        root=root / "n",
        plugin_args=("--health-interval=1", "--usage-status-interval=2"),
    )
    try:
        yield node
    finally:
        node.stop()
        bed.nodes.pop(node.name, None)


def inject(node: SimNode, gpu: int, *what: str) -> str:
    """`tessera sim inject` on the node's state file, as an operator would run it."""
    files = (f"--node-file={node.node_file}", f"--state-file={node.sim_state_file}")
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", "sim", "inject", *files, f"--gpu={gpu}", *what],
        cwd=REPO_ROOT,
        capture_output=True,
        text=True,
        check=True,
        timeout=60,
    )
    return done.stdout


def taints(node: SimNode, gpu: int) -> dict[str, list[Json]]:
    """Device name → its taints, for every published device of GPU `gpu`."""
    out: dict[str, list[Json]] = {}
    for s in node.slices():
        for d in s["spec"].get("devices") or []:
            if d["name"] == f"gpu-{gpu}" or d["name"].startswith(f"gpu-{gpu}-"):
                out[d["name"]] = d.get("taints") or []
    return out


def all_tainted(node: SimNode, gpu: int, value: str, effect: str) -> bool:
    found = taints(node, gpu)
    return len(found) == DEVICES_PER_GPU and all(
        [(t["key"], t.get("value"), t["effect"]) for t in ts]
        == [("gpu.tessera.dev/unhealthy", value, effect)]
        for ts in found.values()
    )


def untainted(node: SimNode, gpu: int) -> bool:
    found = taints(node, gpu)
    return len(found) == DEVICES_PER_GPU and not any(found.values())


def whole_gpu_pod(name: str) -> list[Json]:
    claim: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.tessera.dev"}}]}
            }
        },
    }
    pod: Json = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", "resourceClaimTemplateName": name}],
            "containers": [
                {
                    "name": "train",
                    "image": "busybox",
                    "command": ["sleep", "infinity"],
                    "resources": {"claims": [{"name": "gpu"}]},
                }
            ],
        },
    }
    return [claim, pinned(pod, NODE)]


def node_events(bed: SimCluster, reason: str) -> list[Any]:
    listed = k8s.CoreV1Api(bed.api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={NODE},reason={reason}"
    )
    return list(listed.items or [])


def scrape(node: SimNode) -> str:
    with urllib.request.urlopen(node.metrics_url, timeout=10) as r:
        text: str = r.read().decode()
    return text


def samples(node: SimNode, prefix: str) -> list[float]:
    """The values of the node's metric samples whose lines start with `prefix` (a name, labels or not)."""
    return [float(line.rsplit(" ", 1)[1]) for line in scrape(node).splitlines() if line.startswith(prefix)]


def test_a_lost_gpu_is_tainted_its_pod_evicted_new_claims_go_elsewhere_and_it_recovers(
    bed: SimCluster, health_node: SimNode, ns: str
) -> None:
    apply(bed, ns, whole_gpu_pod("first"))
    first = running(bed, ns, "first")
    (result,) = results(bed, ns, first, "gpu")
    lost = int(result["device"].removeprefix("gpu-"))
    other = 1 - lost
    assert untainted(health_node, lost)

    assert "injected" in inject(health_node, lost, "--lost", "--detail=fell off the bus in e2e")
    wait_for(
        "every device of the lost GPU tainted NoExecute",
        lambda: all_tainted(health_node, lost, "lost", "NoExecute"),
    )
    assert untainted(health_node, other)
    (event,) = wait_for("a GpuUnhealthy event", lambda: node_events(bed, GPU_UNHEALTHY_REASON))
    assert event.type == "Warning" and "fell off the bus in e2e" in event.message
    assert f'tessera_gpu_healthy{{gpu="{lost}",' in scrape(health_node)
    assert f'tessera_gpu_fault_info{{gpu="{lost}"' in scrape(health_node)

    # the real device-taint-eviction controller deletes the pod; the node unprepares and finalizes it
    wait_for("the pod on the lost GPU evicted", lambda: get_pod(bed.api, ns, "first") is None, timeout_s=60)

    # the real scheduler keeps new claims off the tainted devices
    apply(bed, ns, whole_gpu_pod("second"))
    second = running(bed, ns, "second")
    assert [r["device"] for r in results(bed, ns, second, "gpu")] == [f"gpu-{other}"]

    assert "1 fault(s) cleared" in inject(health_node, lost, "--clear")
    wait_for("the taint removed on recovery", lambda: untainted(health_node, lost))
    (recovered,) = wait_for("a GpuRecovered event", lambda: node_events(bed, GPU_RECOVERED_REASON))
    assert recovered.type == "Normal"


def test_a_fatal_xid_holds_its_taint_until_the_plugin_restarts(
    bed: SimCluster, health_node: SimNode, ns: str
) -> None:
    inject(health_node, 1, "--xid=48")
    wait_for("GPU 1 tainted NoSchedule", lambda: all_tainted(health_node, 1, "xid-48", "NoSchedule"))
    inject(health_node, 1, "--clear")
    # three health checks that read the GPU after the clear (the first one counted from here may have read it
    # before): the backend no longer reports the XID, the daemon keeps it
    done = sum(samples(health_node, "tessera_health_checks_total"))
    wait_for(
        "three health checks after the clear",
        lambda: sum(samples(health_node, "tessera_health_checks_total")) >= done + 4,
    )
    assert samples(health_node, 'tessera_gpu_healthy{gpu="1",') == [0.0]
    assert all_tainted(health_node, 1, "xid-48", "NoSchedule")
    health_node.restart_plugin()  # what an administrator does after resetting the GPU
    wait_for("GPU 1 untainted after the restart", lambda: untainted(health_node, 1))


@pytest.mark.mixes_families
def test_describe_resourceclaim_shows_usage(
    bed: SimCluster, health_node: SimNode, ns: str, tmp_path: Path
) -> None:
    template: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "slice"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "vgpu.tessera.dev",
                                # GPU 0: the fake driver's first device, the one the program below uses
                                "selectors": [
                                    {"cel": {"expression": f"device.attributes['{DRIVER_NAME}'].index == 0"}}
                                ],
                                "capacity": {"requests": {"memory": "1Gi", "cores": "30"}},
                            },
                        }
                    ]
                }
            }
        },
    }
    pod = whole_gpu_pod("slice")[1]
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = "slice"
    apply(bed, ns, [template, pod])
    claim = claim_of(bed, ns, running(bed, ns, "slice"), "gpu")
    uid = claim["metadata"]["uid"]
    # a process of the claim, as the container would run it: under the library, in the claim's directory
    program = start(
        TCUDA,
        "usage",
        str(300 * MiB),
        "40",
        "2000",
        env=env(container_view(health_node.claims_dir / uid), tmp_path / "gpu"),
    )
    try:
        assert program.stdout is not None and "ready" in program.stdout.readline()

        def usage() -> Json | None:
            got = claim_of(bed, ns, running(bed, ns, "slice"), "gpu")
            (status,) = got["status"]["devices"]
            found: Json | None = status["data"].get("usage")
            return found

        shown = wait_for("usage in the claim's status", usage, timeout_s=30)
        assert shown["memoryUsed"] == "300Mi" and shown["memoryUsedPercent"] == 29
        text = bed.kubectl.run("describe", "resourceclaim", claim["metadata"]["name"], f"--namespace={ns}")
        assert "Usage" in text and "Memory Used" in text and "300Mi" in text, text
        assert "Sm Time Used Percent" in text and "Throttled Percent" in text, text
        # the same numbers on the node's /metrics
        metrics = scrape(health_node)
        assert (
            f'tessera_claim_memory_used_bytes{{namespace="{ns}",claim="{claim["metadata"]["name"]}"'
            in metrics
        )
    finally:
        program.kill()
        program.wait()
