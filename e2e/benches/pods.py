"""`python -m e2e.benches.pods` (`make bench-e2e`): end-to-end numbers on a real control plane with 4
simulated 8 x H100 nodes, each with the node plugin and a kubelet stand-in, once per client-rate setting of
the control plane (the upstream defaults and production values, e2e/controlplane/settings.py), printed side by
side:

- pod start latency: from the pod's create call returning to the pod seen Running and Ready, p50/p99 over
  200 vGPU pods created at once;
- scheduler throughput in pods/s for whole-GPU, vGPU and MIG pods: pods bound / (last bind - first create).

`--smoke` (`make bench-e2e SMOKE=1`, which `make test` runs): every run once on one node with a few pods, the
production client rates alone; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import json
import os
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

from dra_driver.io.logs import configure
from e2e.benches.meters import total_use
from e2e.controlplane.binaries import Binaries, ensure_built
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.launcher import start_control_plane
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.controlplane.settings import CLIENT_RATES, ClientRates, client_rates
from e2e.harness.kube import WaitTimeoutError, delete_namespace_contents, is_running, wait_for
from e2e.harness.testbed import H100_NODE, make_testbed, running_nodes

NODES = 4
CREATORS = 8
IMAGE = "registry.k8s.io/pause:3.10"


@dataclass(slots=True)
class Tracker:
    """Watches one namespace and notes when each pod was first seen bound and first seen Running."""

    api: k8s.ApiClient
    namespace: str
    watch_s: int = 30  # each watch call's length; a new one lists the namespace again
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
                self.namespace, watch=True, timeout_seconds=self.watch_s, _preload_content=False
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


def pod(
    name: str,
    claim_template: str | None = None,
    *,
    claim: str | None = None,
    node_selector: dict[str, str] | None = None,
) -> dict[str, Any]:
    """A pause pod whose one container uses the claim `claim` (or one made from `claim_template`)."""
    ref = {"resourceClaimName": claim} if claim else {"resourceClaimTemplateName": claim_template}
    spec: dict[str, Any] = {
        "restartPolicy": "Never",
        "resourceClaims": [{"name": "gpu", **ref}],
        "containers": [{"name": "main", "image": IMAGE, "resources": {"claims": [{"name": "gpu"}]}}],
    }
    if node_selector:
        spec["nodeSelector"] = node_selector
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name}, "spec": spec}


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
    wall_s: float = 0.0  # first create to last pod running
    cpu_s: tuple[tuple[str, float], ...] = ()  # who spent how many CPU seconds meanwhile


Processes = Callable[[], dict[str, list[int]]]  # group name → pids, read when a run starts and ends


def _cpu(processes: Processes) -> dict[str, float]:
    return {name: total_use(pids).cpu_s for name, pids in processes().items()}


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
    processes: Processes = dict,
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
    cpu_before = _cpu(processes)
    create_all(api, namespace, bodies, tracker)
    wait_for(
        f"{count} {kind} pods to run",
        lambda: all(n in tracker.running for n in names),
        timeout_s=60 + count * 1.5,
        interval_s=0.2,
    )
    cpu_after = _cpu(processes)
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
        wall_s=max(tracker.running[n] for n in names) - first,
        cpu_s=tuple((k, cpu_after[k] - cpu_before.get(k, 0.0)) for k in cpu_after),
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


def node_files(directory: Path, count: int) -> list[Path]:
    base = yaml.safe_load(H100_NODE.read_text(encoding="utf-8"))
    files = []
    for k in range(count):
        path = directory / f"bench-{k}.yaml"
        path.write_text(yaml.safe_dump({**base, "nodeName": f"sim-bench-{k}"}), encoding="utf-8")
        files.append(path)
    return files


@dataclass(frozen=True, slots=True)
class Measured:
    rates: ClientRates
    single: tuple[float, ...]
    runs: tuple[Run, ...]


def measure(rates: ClientRates, args: argparse.Namespace, binaries: Binaries) -> Measured:
    """One control plane with `rates`, `args.nodes` nodes, every run of the benchmark."""
    with tempfile.TemporaryDirectory(prefix="tessera-bench-") as tmp:
        root = Path(tmp)
        plane = start_control_plane(state_dir=root / "controlplane", binaries=binaries, client_rates=rates)
        try:
            api = plane.api_client()
            bed = make_testbed(plane, api)
            print(
                f"[{rates.name}] starting {args.nodes} simulated 8 x H100 nodes (plugin + stand-in each)...",
                flush=True,
            )
            with running_nodes(bed, node_files(root, args.nodes), root=root / "nodes"):
                namespace = "bench"
                k8s.CoreV1Api(api).create_namespace(
                    k8s.V1Namespace.model_validate({"metadata": {"name": namespace}})
                )
                wait_for_service_account(api, namespace)

                def apply(docs: list[dict[str, Any]]) -> None:
                    bed.kubectl.apply(docs, namespace=namespace)

                def processes() -> dict[str, list[int]]:
                    groups = {c.name: [c.process.pid] for c in plane.components}
                    groups["nodes"] = [
                        r.pid for n in bed.nodes.values() for r in (n.plugin, n.standin) if r is not None
                    ]
                    groups["benchmark"] = [os.getpid()]
                    return groups

                print(f"[{rates.name}] vgpu: {args.single_pods} pods one at a time...", flush=True)
                single = run_sequential(api, namespace, args.single_pods, apply=apply)
                delete_namespace_contents(api, namespace, timeout_s=300)
                runs = []
                for precreated in (False, True):
                    for kind, count in (
                        ("vgpu", args.vgpu_pods),
                        ("whole-gpu", args.nodes * 8),
                        ("mig-1g.10gb", args.mig_pods),
                    ):
                        how = "pre-created claims" if precreated else "claim templates"
                        print(f"[{rates.name}] {kind}: creating {count} pods at once ({how})...", flush=True)
                        runs.append(
                            run_batch(
                                api,
                                namespace,
                                kind,
                                count,
                                apply=apply,
                                precreated=precreated,
                                processes=processes,
                            )
                        )
                        delete_namespace_contents(api, namespace, timeout_s=300)
        finally:
            plane.stop()
    return Measured(rates=rates, single=single, runs=tuple(runs))


_SHORT = {
    "kube-apiserver": "api",
    "kube-controller-manager": "kcm",
    "kube-scheduler": "sched",
    "benchmark": "bench",
}


def _ms(values: Sequence[float], q: float) -> str:
    return f"{percentile(values, q) * 1000:.0f}"


def _rates(r: ClientRates) -> str:
    kcm, sched = r.controller_manager, r.scheduler
    return f"{r.name} (KCM {kcm.qps:g}/{kcm.burst}, sched {sched.qps:g}/{sched.burst})"


def report(measured: Sequence[Measured], *, nodes: int = NODES) -> str:
    """The figures of each client-rate setting side by side, one column per setting."""
    width = 44
    rows = [("client QPS/burst", [_rates(m.rates) for m in measured])]
    first = measured[0].runs[0]
    rows.append(
        (
            f"{first.pods} vGPU pods at once: create -> Running",
            [
                f"p50 {_ms(m.runs[0].latencies, 0.5)} ms  p99 {_ms(m.runs[0].latencies, 0.99)} ms"
                for m in measured
            ],
        )
    )
    rows.append(
        (
            "  CPU meanwhile (core-seconds)",
            [
                f"{sum(c for _, c in m.runs[0].cpu_s):.1f} in {m.runs[0].wall_s:.1f} s ("
                + " ".join(f"{_SHORT.get(name, name)} {c:.1f}" for name, c in m.runs[0].cpu_s)
                + ")"
                for m in measured
            ],
        )
    )
    rows.append(
        (
            f"one pod at a time ({len(measured[0].single)} pods)",
            [f"p50 {_ms(m.single, 0.5)} ms  p99 {_ms(m.single, 0.99)} ms" for m in measured],
        )
    )
    for k, run in enumerate(measured[0].runs):
        how = "claims made beforehand" if run.precreated else "claims from templates"
        rows.append(
            (
                f"{run.kind} x{run.pods}, {how}",
                [
                    f"{m.runs[k].throughput:.1f} pods/s  (p50 {_ms(m.runs[k].latencies, 0.5)} ms, "
                    f"p99 {_ms(m.runs[k].latencies, 0.99)} ms)"
                    for m in measured
                ],
            )
        )
    lines = [f"end to end on {nodes} nodes x 8 H100 (throughput: pods bound / first create to last bind)"]
    lines.extend(f"  {label:<{width}}" + "".join(f"{c:<64}" for c in cells) for label, cells in rows)
    return "\n".join(line.rstrip() for line in lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.pods", description=__doc__)
    parser.add_argument("--vgpu-pods", type=int, default=200)
    parser.add_argument("--mig-pods", type=int, default=112)
    parser.add_argument("--single-pods", type=int, default=20)
    parser.add_argument("--nodes", type=int, default=NODES, help="simulated 8 x H100 nodes")
    parser.add_argument(
        "--client-rates",
        default=",".join(CLIENT_RATES),
        help=f"comma-separated client-rate settings to compare (of {', '.join(CLIENT_RATES)})",
    )
    parser.add_argument("--smoke", action="store_true", help="one node, a few pods, production rates only")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.vgpu_pods, args.mig_pods, args.single_pods = 1, 2, 2, 1
        args.client_rates = "production"
    configure(level="warning")
    try:
        chosen = [client_rates(name.strip()) for name in args.client_rates.split(",") if name.strip()]
    except ControlPlaneError as e:
        parser.error(str(e))
    binaries = ensure_built(allow_build=True)
    measured = [measure(rates, args, binaries) for rates in chosen]
    print()
    print(report(measured, nodes=args.nodes))
    return 0


if __name__ == "__main__":
    sys.exit(main())
