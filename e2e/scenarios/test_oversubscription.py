"""Memory oversubscription through the real node daemon (docs/gpu-sharing.md, "Oversubscription"): a simulated
2 x H100 node whose settings say memoryOversubscription 2 publishes virtualMemory; a claim of the class
vgpu-oversubscribed.tessera.dev larger than a GPU is scheduled there and prepared, its status shows both parts
of its memory, and the library in its container sees its whole limit."""

from __future__ import annotations

import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml

from dra_driver.libtessera.limits_file import parse_limits
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.names import Cap, ClaimUID
from e2e.harness.examples import example, find, pinned
from e2e.harness.kube import Json, WaitTimeoutError
from e2e.harness.node import NODES_DIR, SimNode
from e2e.harness.testbed import SimCluster, start_node
from e2e.scenarios.probes import apply, claim_of, running
from tests.support.doubles.interceptor_programs import TCUDA, container_view, env

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

NODE = "sim-oversub-h100x2"
GiB = 1 << 30


@pytest.fixture(scope="module")
def oversubscribed_node(bed: SimCluster) -> Iterator[SimNode]:
    spec = yaml.safe_load((NODES_DIR / "realnode-h100x2.yaml").read_text())
    root = Path(tempfile.mkdtemp(prefix="tessera-e2e-oversub-"))
    node_file = root / "node.yaml"
    node_file.write_text(yaml.safe_dump({**spec, "nodeName": NODE}))
    settings = root / "settings.yaml"
    settings.write_text(
        "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nmemoryOversubscription: 2\n"
    )
    node = start_node(bed, node_file, root=root / "n", settings_file=settings)
    try:
        yield node
    finally:
        node.stop()
        bed.nodes.pop(node.name, None)


def big_pod(name: str, node: str) -> list[Json]:
    template: Json = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "gpu",
                            "exactly": {
                                "deviceClassName": "vgpu-oversubscribed.tessera.dev",
                                "capacity": {
                                    "requests": {
                                        Cap.MEMORY: "40Gi",
                                        Cap.VIRTUAL_MEMORY: "60Gi",
                                        Cap.CORES: "0",
                                    }
                                },
                            },
                        }
                    ]
                }
            }
        },
    }
    pod = pinned(find(example("03-vgpu"), "Pod", "vgpu-3000mi-30"), node, name=name)
    pod["spec"]["resourceClaims"][0]["resourceClaimTemplateName"] = name
    return [template, pod]


def test_a_claim_larger_than_the_gpu_prepares_and_sees_its_limit(
    bed: SimCluster, oversubscribed_node: SimNode, ns: str, tmp_path: Path
) -> None:
    vgpu = next(
        d
        for s in oversubscribed_node.slices()
        for d in s["spec"].get("devices") or []
        if d["name"] == "gpu-0-vgpu"
    )
    assert vgpu["capacity"][Cap.VIRTUAL_MEMORY]["value"] == vgpu["capacity"][Cap.MEMORY]["value"]  # ratio 2
    apply(bed, ns, big_pod("big", NODE))
    try:
        pod = running(bed, ns, "big", timeout_s=120)
    except WaitTimeoutError as e:
        described = bed.kubectl.run("describe", "pod", "big", f"--namespace={ns}")
        claims = bed.kubectl.run("get", "resourceclaims", "-o", "yaml", f"--namespace={ns}")
        raise AssertionError(f"{e}\n{described}\n{claims}") from e
    claim = claim_of(bed, ns, pod, "gpu")
    uid = ClaimUID(claim["metadata"]["uid"])
    (device,) = claim["status"]["devices"]
    assert device["data"]["limits"] == {"memory": "40960Mi", "cores": 0, "virtualMemory": "61440Mi"}
    limits = parse_limits((oversubscribed_node.claims_dir / uid / LIMITS_FILE_NAME).read_text())
    assert [(g.memory_bytes, g.resident) for g in limits.gpus] == [(100 * GiB, 40 * GiB)]
    # the library in the claim's container: the whole limit as the GPU's memory (the GPU has 80 GiB)
    done = subprocess.run(
        [str(TCUDA), "device", "0", str(100 * GiB)],
        env=env(container_view(oversubscribed_node.claims_dir / uid), tmp_path / "gpu"),
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    assert done.returncode == 0, done.stdout + done.stderr
