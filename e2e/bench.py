"""`python -m e2e.bench` (`make bench-e2e`): end-to-end numbers on a real control plane with 4 simulated
8 x H100 nodes, each with the node plugin and a kubelet stand-in.

- pod start latency: from the pod's create call returning to the pod seen Running and Ready, p50/p99 over
  200 vGPU pods created at once;
- scheduler throughput in pods/s for whole-GPU, vGPU and MIG pods: pods bound / (last bind - first create).
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import tempfile
import threading
import time
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.watch.watch import iter_resp_lines

from dra_driver.logs import configure
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.launcher import start_control_plane
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.kube import WaitTimeoutError, delete_namespace_contents, is_running, wait_for
from e2e.testbed import H100_NODE, make_testbed, running_nodes

NODES = 4
CREATORS = 8
IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(slots=True)
class Tracker:
    """Watches one namespace and notes when each pod was first seen bound and first seen Running."""

    api: k8s.ApiClient
    namespace: str
    created: dict[str, float] = field(default_factory=dict)
    bound: dict[str, float] = field(default_factory=dict)
    running: dict[str, float] = field(default_factory=dict)
    _stop: threading.Event = field(default_factory=threading.Event)
    _thread: threading.Thread | None = None
    _ready: threading.Event = field(default_factory=threading.Event)

    def start(self) -> None:
        self._thread = threading.Thread(target=self._run, daemon=True)
        self._thread.start()
        self._ready.wait(10)

    def _run(self) -> None:
        core = k8s.CoreV1Api(self.api)
        while not self._stop.is_set():
            response: Any = core.list_namespaced_pod(
                self.namespace, watch=True, timeout_seconds=30, _preload_content=False
            )
            self._ready.set()
            for line in iter_resp_lines(response):  # type: ignore[no-untyped-call]
                if not line:
                    continue
                now = time.monotonic()
                pod = json.loads(line)["object"]
                name = pod.get("metadata", {}).get("name")
                if name is None:
                    continue
                if pod.get("spec", {}).get("nodeName"):
                    self.bound.setdefault(name, now)
                if is_running(pod):
                    self.running.setdefault(name, now)
                if self._stop.is_set():
                    break
            response.release_conn()

    def stop(self) -> None:
        self._stop.set()


def template(name: str, request: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": request}]}}},
    }


def pod(name: str, claim_template: str | None = None, *, claim: str | None = None) -> dict[str, Any]:
    ref = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": claim_template}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name},
        "spec": {
            "restartPolicy": "Never",
            "resourceClaims": [{"name": "gpu", **ref}],
            "containers": [{"name": "main", "image": IMAGE, "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


TEMPLATES = {
    "whole-gpu": template("whole", {"deviceClassName": "gpu.tessera.dev"}),
    "vgpu": template(
        "slice",
        {
            "deviceClassName": "vgpu.tessera.dev",
            "capacity": {"requests": {"memory": "1Gi", "cores": "5"}},
        },
    ),
    "mig-1g.10gb": template("mig", {"deviceClassName": "mig-1g.10gb.gpu.tessera.dev"}),
}


def create_all(api: k8s.ApiClient, namespace: str, pods: Sequence[dict[str, Any]], tracker: Tracker) -> None:
    core = k8s.CoreV1Api(api)

    def create(body: dict[str, Any]) -> None:
        core.create_namespaced_pod(namespace, k8s.V1Pod.model_validate(body))
        tracker.created[body["metadata"]["name"]] = time.monotonic()

    with ThreadPoolExecutor(max_workers=CREATORS) as pool:
        list(pool.map(create, pods))


def percentile(values: Sequence[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, max(0, round(q * (len(ordered) - 1))))]


@dataclass(frozen=True, slots=True)
class Run:
    kind: str
    pods: int
    throughput: float
    latencies: tuple[float, ...]
    precreated: bool


def claim_from(kind: str, name: str) -> dict[str, Any]:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name},
        "spec": TEMPLATES[kind]["spec"]["spec"],
    }


def run_batch(
    api: k8s.ApiClient,
    namespace: str,
    kind: str,
    count: int,
    *,
    apply: Callable[[list[dict[str, Any]]], None],
    precreated: bool,
) -> Run:
    """All pods at once. With `precreated` each pod names a ResourceClaim made beforehand, so only the
    scheduler (and the nodes) are timed; otherwise the resourceclaim-controller makes claims from a
    template as the pods arrive."""
    tracker = Tracker(api=api, namespace=namespace)
    tracker.start()
    names = [f"{kind.replace('.', '-')}-{k:03d}" for k in range(count)]
    if precreated:
        apply([claim_from(kind, f"claim-{n}") for n in names])
        bodies = [pod(n, claim=f"claim-{n}") for n in names]
    else:
        apply([TEMPLATES[kind]])
        bodies = [pod(n, TEMPLATES[kind]["metadata"]["name"]) for n in names]
    create_all(api, namespace, bodies, tracker)
    wait_for(
        f"{count} {kind} pods to run",
        lambda: all(n in tracker.running for n in names),
        timeout_s=60 + count * 1.5,
        interval_s=0.2,
    )
    tracker.stop()
    first = min(tracker.created[n] for n in names)
    last_bound = max(tracker.bound[n] for n in names)
    latencies = tuple(tracker.running[n] - tracker.created[n] for n in names)
    return Run(
        kind=kind,
        pods=count,
        throughput=count / (last_bound - first),
        latencies=latencies,
        precreated=precreated,
    )


def run_sequential(
    api: k8s.ApiClient, namespace: str, count: int, *, apply: Callable[[list[dict[str, Any]]], None]
) -> tuple[float, ...]:
    """Start latency without queueing: one vGPU pod at a time, each waited for."""
    tracker = Tracker(api=api, namespace=namespace)
    tracker.start()
    apply([TEMPLATES["vgpu"]])
    for k in range(count):
        name = f"single-{k:03d}"
        create_all(api, namespace, [pod(name, TEMPLATES["vgpu"]["metadata"]["name"])], tracker)
        started = time.monotonic()
        while name not in tracker.running:
            if time.monotonic() - started > 60:
                raise WaitTimeoutError(f"{name} did not run within 60s")
            time.sleep(0.01)
    tracker.stop()
    return tuple(tracker.running[n] - tracker.created[n] for n in tracker.created)


def node_files(directory: Path) -> list[Path]:
    base = yaml.safe_load(H100_NODE.read_text(encoding="utf-8"))
    files = []
    for k in range(NODES):
        path = directory / f"bench-{k}.yaml"
        path.write_text(yaml.safe_dump({**base, "nodeName": f"sim-bench-{k}"}), encoding="utf-8")
        files.append(path)
    return files


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.bench", description=__doc__)
    parser.add_argument("--vgpu-pods", type=int, default=200)
    parser.add_argument("--mig-pods", type=int, default=112)
    parser.add_argument("--single-pods", type=int, default=20)
    args = parser.parse_args(argv)
    configure(level="warning")
    binaries = ensure_built(allow_build=True)
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        root = Path(tmp)
        plane = start_control_plane(state_dir=root / "controlplane", binaries=binaries)
        try:
            api = plane.api_client()
            bed = make_testbed(plane, api)
            print(
                f"starting {NODES} simulated 8 x H100 nodes (plugin + kubelet stand-in each)...", flush=True
            )
            with running_nodes(bed, node_files(root), root=root / "nodes"):
                namespace = "bench"
                k8s.CoreV1Api(api).create_namespace(
                    k8s.V1Namespace.model_validate({"metadata": {"name": namespace}})
                )
                wait_for_service_account(api, namespace)

                def apply(docs: list[dict[str, Any]]) -> None:
                    bed.kubectl.apply(docs, namespace=namespace)

                print(f"vgpu: {args.single_pods} pods one at a time...", flush=True)
                single = run_sequential(api, namespace, args.single_pods, apply=apply)
                delete_namespace_contents(api, namespace, timeout_s=300)
                runs = []
                for precreated in (False, True):
                    for kind, count in (
                        ("vgpu", args.vgpu_pods),
                        ("whole-gpu", NODES * 8),
                        ("mig-1g.10gb", args.mig_pods),
                    ):
                        how = "pre-created claims" if precreated else "claim templates"
                        print(f"{kind}: creating {count} pods at once ({how})...", flush=True)
                        runs.append(
                            run_batch(api, namespace, kind, count, apply=apply, precreated=precreated)
                        )
                        delete_namespace_contents(api, namespace, timeout_s=300)
        finally:
            plane.stop()
    print()
    print(f"pod creation -> Running (vGPU, {runs[0].pods} pods on {NODES} nodes x 8 GPUs):")
    lat = runs[0].latencies
    print(
        f"  p50 {percentile(lat, 0.5) * 1000:.0f} ms   p99 {percentile(lat, 0.99) * 1000:.0f} ms   "
        f"mean {statistics.fmean(lat) * 1000:.0f} ms   max {max(lat) * 1000:.0f} ms"
    )
    print(
        f"  one pod at a time ({len(single)} pods): p50 {percentile(single, 0.5) * 1000:.0f} ms   "
        f"p99 {percentile(single, 0.99) * 1000:.0f} ms"
    )
    print("scheduler throughput (pods bound / time from first create to last bind):")
    for run in runs:
        how = "claims made beforehand" if run.precreated else "claims from templates"
        print(
            f"  {run.kind:<12} {run.pods:>4} pods  {how:<22} {run.throughput:6.1f} pods/s   "
            f"(start latency p50 {percentile(run.latencies, 0.5) * 1000:.0f} ms, "
            f"p99 {percentile(run.latencies, 0.99) * 1000:.0f} ms)"
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
