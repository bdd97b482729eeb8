"""Bringing the demo up (build if needed, control plane, nodes, examples, the table) and down again."""

from __future__ import annotations

import time
import urllib.request
from pathlib import Path

from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.io.safe_tree import remove_tree
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.launcher import start_control_plane, stop_control_plane
from e2e.controlplane.processes import stop_record
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.demo import state as demo_state
from e2e.harness.examples import device_rows, example_files, load, table
from e2e.harness.kube import Kubectl, list_claims, list_pods, pod_claim_name, wait_for, wait_running
from e2e.harness.node import BackendKind, SimNode
from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.harness.testbed import H100_NODE, MIXED_NODE, SimCluster, make_testbed, start_node
from e2e.kubelet_standin.errors import StandInError
from tests.support.doubles.fake_mps import mps_dir_for, stop_mps_daemons

NAMESPACE = "tessera-demo"
POD_TIMEOUT_S = 120.0


def _step(message: str) -> None:
    print(f"==> {message}", flush=True)


def _create_namespace(api: k8s.ApiClient) -> None:
    core = k8s.CoreV1Api(api)
    try:
        core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": NAMESPACE}}))
    except ApiException as e:
        if e.status != 409:
            raise
    wait_for_service_account(api, NAMESPACE)


# Examples that want an idle node: aligned multi-GPU claims (4 GPUs under one NUMA node and NVLink domain).
# The other examples spread over the H100 node's GPUs, so these run first, alone, are shown, and go again.
ALONE = ("09-aligned-gpus.yaml",)
# The smoke form's one example (`make demo SMOKE=1`): the pod the demo describes.
SMOKE_EXAMPLE = "03-vgpu.yaml"


def _apply_example(bed: SimCluster, path: Path) -> None:
    names = [d["metadata"]["name"] for d in load(path) if d["kind"] == "Pod"]
    bed.kubectl.apply_path(path, namespace=NAMESPACE)
    started = time.monotonic()
    for name in names:
        remaining = max(1.0, POD_TIMEOUT_S - (time.monotonic() - started))
        try:
            wait_running(bed.api, NAMESPACE, name, timeout_s=remaining)
        except StandInError:
            print(f"    {name}: not running after {POD_TIMEOUT_S:.0f}s (see the table)", flush=True)
    print(f"    {path.name}: {', '.join(names)}", flush=True)


def _apply_examples(bed: SimCluster, *, smoke: bool) -> None:
    # One file at a time, each waited for: the selective examples (by UUID, by type) get their GPUs before
    # the others could take them, so the demo comes out the same every time.
    files = [p for p in example_files() if not smoke or p.name == SMOKE_EXAMPLE]
    alone = [p for p in files if p.name in ALONE]
    for path in alone:
        _apply_example(bed, path)
    if alone:
        print_table(bed)
        for path in alone:
            bed.kubectl.run("delete", f"--namespace={NAMESPACE}", "--wait=true", "-f", str(path))
        wait_for(
            "the aligned examples' claims to go",
            lambda: not list_claims(bed.api, NAMESPACE),
            timeout_s=POD_TIMEOUT_S,
        )
        print(f"    {', '.join(p.name for p in alone)}: deleted again, so the examples below have the GPUs\n")
    for path in files:
        if path not in alone:
            _apply_example(bed, path)


def _describe_one(bed: SimCluster) -> str:
    pods = {p["metadata"]["name"]: p for p in list_pods(bed.api, NAMESPACE)}
    pod = pods.get("vgpu-3000mi-30")
    if pod is None:
        return "(no vgpu-3000mi-30 pod to describe)"
    claim = pod_claim_name(pod, "gpu")
    header = f"$ kubectl describe resourceclaim {claim} -n {NAMESPACE}\n"
    return header + bed.kubectl.run("describe", "resourceclaim", claim, f"--namespace={NAMESPACE}")


# a few lines of each node's /metrics worth showing: what is allocated, and health
METRIC_LINES = (
    "tessera_gpu_devices_in_use{",
    "tessera_gpu_memory_allocated_bytes{",
    "tessera_gpu_healthy{",
    "tessera_claim_memory_limit_bytes{",
    "tessera_kubelet_call_duration_seconds_count{",
)


def metrics_excerpt(node: SimNode, *, per_metric: int = 2) -> list[str]:
    """A few live lines of the node's /metrics (the non-zero ones first)."""
    try:
        with urllib.request.urlopen(node.metrics_url, timeout=10) as r:
            text = r.read().decode()
    except OSError as e:
        return [f"(not reachable: {e})"]
    lines = [line for line in text.splitlines() if line.startswith(METRIC_LINES)]
    shown: list[str] = []
    for prefix in METRIC_LINES:
        mine = sorted((x for x in lines if x.startswith(prefix)), key=lambda x: x.endswith((" 0", " 0.0")))
        shown += mine[:per_metric]
    return shown


def print_metrics(nodes: list[SimNode]) -> None:
    for node in nodes:
        print(f"{node.name}: {node.metrics_url}", flush=True)
        for line in metrics_excerpt(node):
            print(f"    {line}", flush=True)


def print_table(bed: SimCluster) -> None:
    rows = []
    for pod in sorted(list_pods(bed.api, NAMESPACE), key=lambda p: p["metadata"]["name"]):
        rows.extend(device_rows(bed.api, NAMESPACE, pod))
    print(table(rows), flush=True)


def up(state_dir: Path, *, backend: BackendKind = BackendKind.SIMULATED, smoke: bool = False) -> int:
    """`smoke`: one example instead of all of them (what `make test` runs)."""
    state_dir = state_dir.resolve()
    if demo_state.load(state_dir) is not None:
        _step("stopping the previous demo")
        down(state_dir)
    _step("checking the Kubernetes binaries (a cold build takes 15-30 minutes; progress below)")
    binaries = ensure_built(allow_build=True)
    _step("starting etcd, kube-apiserver, kube-controller-manager, kube-scheduler")
    plane = start_control_plane(
        state_dir=state_dir / "controlplane", binaries=binaries, die_with_parent=False
    )
    api = plane.api_client()
    _step("applying the DeviceClasses from deviceclasses/")
    bed = make_testbed(plane, api)
    nodes = []
    try:
        gpus = "simulated GPUs" if backend is BackendKind.SIMULATED else "NVML over the fake libnvidia-ml"
        for node_file in (H100_NODE, MIXED_NODE):
            _step(f"starting node {node_file.stem} ({gpus}): node plugin + kubelet stand-in")
            nodes.append(
                start_node(
                    bed,
                    node_file,
                    root=state_dir / "nodes" / node_file.stem,
                    die_with_parent=False,
                    backend=backend,
                )
            )
    finally:
        demo_state.save(
            state_dir,
            demo_state.DemoState(
                kubeconfig=str(plane.kubeconfig),
                kubectl=str(binaries.kubectl),
                namespace=NAMESPACE,
                nodes=tuple(n.record() for n in nodes if n.plugin and n.standin),
            ),
        )
    _step(f"applying deploy/examples/ in namespace {NAMESPACE}")
    _create_namespace(api)
    _apply_examples(bed, smoke=smoke)
    print()
    print_table(bed)
    print()
    print(_describe_one(bed))
    print()
    _step("the node plugins' metrics (docs/metrics.md; a few live lines of each)")
    print_metrics(nodes)
    print()
    kubectl = Kubectl(binary=binaries.kubectl, kubeconfig=plane.kubeconfig)
    print(
        "The demo keeps running. Use it with:\n"
        f"  export KUBECONFIG={plane.kubeconfig}\n"
        f"  alias kubectl={kubectl.binary}\n"
        f"  kubectl get pods,resourceclaims -n {NAMESPACE} -o wide\n"
        f"  kubectl get pods -n {SYSTEM_NS} -o wide   # the node plugins' pods (their tokens)\n"
        "  kubectl get resourceslices\n"
        f"  kubectl describe resourceclaim -n {NAMESPACE} <claim>\n"
        + "".join(f"  curl -s {n.metrics_url}   # {n.name}\n" for n in nodes)
        + "  .venv/bin/tessera sim inject --node-file e2e/nodes/<node>.yaml "
        f"--state-file {state_dir}/nodes/<node>/sim-state.json --gpu 0 --lost\n"
        "      # a lost GPU: its devices tainted NoExecute, its pods evicted (docs/metrics.md)\n"
        f"Logs: {state_dir}/controlplane/logs, {state_dir}/nodes/<node>/logs; "
        f"what each container got: {state_dir}/nodes/<node>/var/lib/standin/pods/\n"
        "Stop it with: make demo-down",
        flush=True,
    )
    return 0


def _stop_mps(root: Path) -> int:
    """A node's MPS control daemons outlive its plugin, by design: stop them, and remove their directory
    when it lies outside the node's root (a short one in /tmp)."""
    mps_dir = mps_dir_for(root)
    stopped = len(stop_mps_daemons(mps_dir))
    if not mps_dir.is_relative_to(root):
        remove_tree(mps_dir)
    return stopped


def down(state_dir: Path) -> int:
    state_dir = state_dir.resolve()
    saved = demo_state.load(state_dir)
    stopped = 0
    if saved is not None:
        for node in saved.nodes:
            stopped += stop_record(node.plugin, grace_s=15.0)
            stopped += stop_record(node.standin, grace_s=15.0)
            stopped += _stop_mps(Path(node.root))
    stopped += stop_control_plane(state_dir / "controlplane")
    demo_state.forget(state_dir)
    print(f"demo stopped ({stopped} processes)", flush=True)
    return 0
