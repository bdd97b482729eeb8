"""Memory oversubscription through the real node daemon (docs/gpu-sharing.md, "Oversubscription"): a simulated
2 x H100 node whose settings say memoryOversubscription 2 publishes virtualMemory; a claim of the class
vgpu-oversubscribed.tessera.dev larger than a GPU is scheduled there and prepared, its status shows both parts
of its memory, and the library in its container sees its whole limit. On such a node driven through NVML
(the fake libnvidia-ml), a claim whose processes page hard gets the MostlyPaging Warning Event on the claim
and its pod, and a neighbour resident in device memory does not ("When a claim pages")."""

from __future__ import annotations

import os
import subprocess
import tempfile
import time
from collections.abc import Iterator
from pathlib import Path

import pytest
import yaml
from kubernetes import client as k8s

from dra_driver.libtessera.limits_file import parse_limits
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.names import Cap, ClaimUID
from e2e.harness.examples import example, find, pinned
from e2e.harness.kube import Json, WaitTimeoutError
from e2e.harness.node import NODES_DIR, BackendKind, SimNode
from e2e.harness.testbed import SimCluster, start_node
from e2e.scenarios.probes import apply, claim_of, running
from kubelet_plugin.observability.paging_watch import MOSTLY_PAGING_REASON
from tests.support.doubles.interceptor_programs import TCUDA, TOVERSUB, container_view, env, start

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

NODE = "sim-oversub-h100x2"
PAGING_NODE = "sim-paging-h100x2"
GiB, MiB = 1 << 30, 1 << 20


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


@pytest.fixture(scope="module")
def paging_node(bed: SimCluster) -> Iterator[tuple[SimNode, Path]]:
    """The same node driven through NVML over the fake libnvidia-ml, whose PCIe link carries the page moves
    of the fake libcuda processes sharing the file it returns (FAKE_GPU_MEM: the daemon reads it too)."""
    spec = yaml.safe_load((NODES_DIR / "realnode-h100x2.yaml").read_text())
    root = Path(tempfile.mkdtemp(prefix="tessera-e2e-paging-"))
    node_file = root / "node.yaml"
    node_file.write_text(yaml.safe_dump({**spec, "nodeName": PAGING_NODE, "hostMemoryGiB": 512}))
    settings = root / "settings.yaml"
    settings.write_text(
        "apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nmemoryOversubscription: 2\n"
    )
    memory = root / "gpu-memory"
    saved = os.environ.get("FAKE_GPU_MEM")
    os.environ["FAKE_GPU_MEM"] = str(memory)  # the plugin's environment is this process's
    try:
        node = start_node(bed, node_file, root=root / "n", settings_file=settings, backend=BackendKind.NVML)
    finally:
        if saved is None:
            os.environ.pop("FAKE_GPU_MEM", None)
        else:
            os.environ["FAKE_GPU_MEM"] = saved
    try:
        yield node, memory
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


def sized_pod(name: str, node: str, memory: str, virtual: str) -> list[Json]:
    template, pod = big_pod(name, node)
    template["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"].update(
        {Cap.MEMORY: memory, Cap.VIRTUAL_MEMORY: virtual}
    )
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


def _paging_events(bed: SimCluster, ns: str) -> list[k8s.CoreV1Event]:
    listed = k8s.CoreV1Api(bed.api).list_namespaced_event(ns, field_selector=f"reason={MOSTLY_PAGING_REASON}")
    return list(listed.items or [])


def test_a_claim_that_pages_hard_gets_a_warning_and_its_resident_neighbour_none(
    bed: SimCluster, paging_node: tuple[SimNode, Path], ns: str, tmp_path: Path
) -> None:
    node, memory = paging_node
    apply(bed, ns, sized_pod("pager", PAGING_NODE, "256Mi", "1Gi"))  # 1.25 GiB, 256 MiB on the device
    apply(bed, ns, sized_pod("resident", PAGING_NODE, "256Mi", "256Mi"))  # will use 128 MiB: all on it
    uids = {}
    for name in ("pager", "resident"):
        pod = running(bed, ns, name, timeout_s=120)
        uids[name] = (claim_of(bed, ns, pod, "gpu")["metadata"]["uid"], pod["metadata"]["uid"])

    def process_env(name: str) -> dict[str, str]:
        view = container_view(node.claims_dir / uids[name][0])
        extra = {"FAKE_GPU_MEM": str(memory), "FAKE_GPU_MEM_MB": "1024", "FAKE_PAGE_MBPS": "30000"}
        return env(view, tmp_path / "gpu", **extra)

    # on a 1 GiB GPU: 1 GiB of managed memory read over and over (about 0.07 s a pass), for about 50 s
    limit, resident = 1280 * MiB, 256 * MiB
    args = (
        "work",
        str(limit),
        str(resident),
        str(256 * MiB),
        "700",
        str(tmp_path / "ready"),
        str(tmp_path / "done"),
    )
    pager = start(TOVERSUB, *args, env=process_env("pager"))
    holder = start(TCUDA, "hold", str(128 * MiB), env=process_env("resident"))
    try:
        assert holder.stdout is not None and "ready" in holder.stdout.readline()
        deadline = time.monotonic() + 90  # the daemon decides once its readings cover half of 60 s
        while time.monotonic() < deadline and not _paging_events(bed, ns) and pager.poll() is None:
            time.sleep(2)
        events = _paging_events(bed, ns)
        alive = pager.poll() is None
    finally:
        (tmp_path / "done").touch()
        for p in (pager, holder):
            p.kill()
            p.wait()
    assert alive, "the pager stopped before any event"
    got = {(e.involved_object.kind, e.involved_object.uid) for e in events}
    assert got == {("ResourceClaim", uids["pager"][0]), ("Pod", uids["pager"][1])}, events
    message = events[0].message or ""
    assert "holds 1Gi of host-backed (managed) memory on GPU 0" in message, message
    assert all(e.type == "Warning" for e in events)
