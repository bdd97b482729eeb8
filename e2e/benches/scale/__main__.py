"""`python -m e2e.benches.scale` (`make bench-scale`): what publishing every MIG placement costs
kube-scheduler at 10, 50 and 100 simulated 8 x H100 nodes, and how fast pods are placed.

For each node count: a fresh control plane (production client rates), the nodes (e2e.benches.scale.cluster),
then per layout (every placement; fewer MIG profiles) a line describing the published slices, and per family
(whole GPU, vgpu 10Gi/20 %, MIG 1g.10gb, a seeded random mix) one line:

    scale nodes=100 devices=22400 family=vgpu pods=2000 pods_per_s=… p50_ms=… p99_ms=…
          slices_per_node=… steady_writes=…      (one line)

followed by an indented line with the run's other figures. docs/performance.md explains every field.

`--smoke` (`make bench-scale SMOKE=1`, which `make test` runs): 3 nodes (one with a plugin and a kubelet),
the vgpu-only layout, the vgpu family at a fifth of its pods; its figures mean nothing.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from pathlib import Path

from kubernetes import client as k8s

from dra_driver.io.logs import configure
from e2e.benches.meters import etcd_slice_bytes, json_slice_bytes, total_use
from e2e.benches.scale.cluster import LAYOUTS, Layout, ScaleCluster, layout_shape, scale_cluster
from e2e.benches.scale.family_run import NAMESPACE, FamilyRun, run_family
from e2e.benches.scale.workloads import FAMILIES, PER_NODE, family_wants
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.pytest_fixture import wait_for_service_account

MIB = 1024 * 1024


def _csv(text: str, allowed: tuple[str, ...] | None = None) -> list[str]:
    items = [t.strip() for t in text.split(",") if t.strip()]
    bad = [t for t in items if allowed is not None and t not in allowed]
    if bad:
        raise argparse.ArgumentTypeError(f"{bad[0]!r} is not one of {', '.join(allowed or ())}")
    return items


def _load() -> str:
    one, five, fifteen = os.getloadavg()
    return f"{one:.2f} {five:.2f} {fifteen:.2f}"


def describe_layout(cluster: ScaleCluster, layout: Layout, publish_s: float) -> str:
    slices, devices = layout_shape(layout)
    count, etcd_bytes = etcd_slice_bytes(cluster.plane.etcd)
    json_bytes = json_slice_bytes(cluster.api)
    use = total_use(cluster.publisher_pids())
    bulk = len(cluster.names) - len(cluster.sample)
    return (
        f"layout nodes={len(cluster.names)} layout={layout.name} devices_per_node={devices} "
        f"slices_per_node={slices} slices={count} etcd_bytes={etcd_bytes} json_bytes={json_bytes} "
        f"publish_s={publish_s:.1f} publishers={len(cluster.publishers)} publisher_nodes={bulk} "
        f"publishers_cpu_s={use.cpu_s:.1f} publishers_rss_mib={use.rss_bytes / MIB:.0f}"
    )


def line(nodes: int, devices: int, slices: int, run: FamilyRun) -> str:
    return (
        f"scale nodes={nodes} devices={devices} family={run.family} pods={run.pods} "
        f"pods_per_s={run.pods_per_s:.1f} p50_ms={run.p50_ms:.0f} p99_ms={run.p99_ms:.0f} "
        f"slices_per_node={slices} steady_writes={run.steady_writes}"
    )


def details(layout: Layout, run: FamilyRun, cluster: ScaleCluster) -> str:
    use = total_use(cluster.publisher_pids())
    return (
        f"  layout={layout.name} bound={run.bound}/{run.pods} create_s={run.create_s:.1f} "
        f"scheduler_cpu_s={run.scheduler_cpu_s:.1f} "
        f"scheduler_cpu_ms_per_pod={1000 * run.scheduler_cpu_s / max(run.bound, 1):.1f} "
        f"apiserver_cpu_s={run.apiserver_cpu_s:.1f} publishers_cpu_s={run.publishers_cpu_s:.1f} "
        f"publishers_rss_mib={use.rss_bytes / MIB:.0f} running={run.running} "
        f"run_p50_ms={run.run_p50_ms:.0f} run_p99_ms={run.run_p99_ms:.0f} load={_load()}"
    )


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.scale", description=__doc__)
    parser.add_argument("--nodes", type=lambda t: [int(n) for n in _csv(t)], default=[10, 50, 100])
    parser.add_argument("--families", type=lambda t: _csv(t, FAMILIES), default=list(FAMILIES))
    parser.add_argument("--layouts", type=lambda t: _csv(t, tuple(LAYOUTS)), default=list(LAYOUTS))
    parser.add_argument("--sample", type=int, default=2, help="nodes with a plugin daemon and a kubelet")
    parser.add_argument("--seed", type=int, default=12, help="of the mix family's random kinds")
    parser.add_argument(
        "--budget", type=float, default=40.0, help="seconds a run waits for its pods to be bound"
    )
    parser.add_argument(
        "--scale-pods",
        type=float,
        default=1.0,
        help="multiply every family's pods per node (for quick tries)",
    )
    parser.add_argument("--smoke", action="store_true", help="3 nodes, vgpu only, a few pods (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.sample, args.scale_pods = [3], 1, 0.2
        args.layouts, args.families = ["vgpu-only"], ["vgpu"]
    configure(level="warning")
    binaries = ensure_built(allow_build=True)
    started = time.monotonic()
    print(
        f"# bench-scale: nodes={args.nodes} families={args.families} layouts={args.layouts} "
        f"sample={args.sample} seed={args.seed} load={_load()}",
        flush=True,
    )
    for nodes in args.nodes:
        with tempfile.TemporaryDirectory(prefix="tsc-") as tmp:
            first = LAYOUTS[args.layouts[0]]
            with scale_cluster(
                root=Path(tmp), binaries=binaries, nodes=nodes, sample=min(args.sample, nodes), layout=first
            ) as cluster:
                k8s.CoreV1Api(cluster.api).create_namespace(
                    k8s.V1Namespace.model_validate({"metadata": {"name": NAMESPACE}})
                )
                wait_for_service_account(cluster.api, NAMESPACE)
                for k, name in enumerate(args.layouts):
                    layout = LAYOUTS[name]
                    if k > 0:
                        cluster.set_layout(layout)
                    print(describe_layout(cluster, layout, cluster.publish_s), flush=True)
                    slices, devices = layout_shape(layout)
                    for family in [f for f in args.families if f in layout.serves]:
                        count = max(1, round(PER_NODE[family] * nodes * args.scale_pods))
                        wants = family_wants(family, count, seed=args.seed)
                        run = run_family(cluster, family, wants, budget_s=args.budget)
                        print(line(nodes, devices * nodes, slices, run), flush=True)
                        print(details(layout, run, cluster), flush=True)
    print(f"# bench-scale done in {time.monotonic() - started:.0f} s, load={_load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
