"""`python -m e2e.benches.scale` (`make bench-scale`): what publishing every MIG placement costs
kube-scheduler at 10, 50 and 100 simulated 8 x H100 nodes, and how fast pods are placed.

For each node count: a fresh control plane (production client rates), the nodes (e2e.benches.scale.cluster),
then per layout (every placement; fewer MIG profiles) a line describing the published slices, and per family
(whole GPU, vgpu 10Gi/20 %, MIG 1g.10gb, a seeded random mix) one line:

    scale nodes=100 devices=22400 family=vgpu pods=2000 pods_per_s=… p50_ms=… p99_ms=…
          slices_per_node=… steady_writes=…      (one line)

followed by an indented line with the run's other figures. docs/performance.md explains every field.

`--schedulers default,volcano` (`make bench-scale SCHEDULERS=default,volcano`): every family run once per
scheduler on the same nodes, kube-scheduler's pods then vc-scheduler's (Volcano started beside the plane,
e2e/volcano), each run's lines ending in `scheduler=…`, then one line per family side by side:

    schedulers nodes=100 family=vgpu default_pods_per_s=… volcano_pods_per_s=… default_cpu_ms_per_pod=…
               volcano_cpu_ms_per_pod=… default_bound=…/… volcano_bound=…/…      (one line)

and, where Volcano is one of them, a gang phase (e2e.benches.scale.gang) on the last layout that serves vgpu:

    gang nodes=100 workers=64 bound=64/64 bound_s=… running=…/… running_s=… gang_nodes=… scheduler_cpu_s=…

`--smoke` (`make bench-scale SMOKE=1`, which `make test` runs): 3 nodes (one with a plugin and a kubelet),
the vgpu-only layout, the vgpu family at a fifth of its pods, a gang of 4; its figures mean nothing.
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
from e2e.benches.scale.family_run import NAMESPACE, SCHEDULERS, FamilyRun, run_family
from e2e.benches.scale.gang import GangRun, run_gang
from e2e.benches.scale.workloads import FAMILIES, PER_NODE, family_wants
from e2e.controlplane.binaries import Binaries, ensure_built
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.volcano.binaries import VolcanoBinaries
from e2e.volcano.binaries import ensure_built as ensure_volcano_built
from e2e.volcano.launcher import Volcano

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


def line(nodes: int, devices: int, slices: int, run: FamilyRun, *, named: bool = False) -> str:
    """`named`: the scheduler is one of several (`--schedulers`), so the line says which."""
    return (
        f"scale nodes={nodes} devices={devices} family={run.family} pods={run.pods} "
        f"pods_per_s={run.pods_per_s:.1f} p50_ms={run.p50_ms:.0f} p99_ms={run.p99_ms:.0f} "
        f"slices_per_node={slices} steady_writes={run.steady_writes}"
        + (f" scheduler={run.scheduler}" if named else "")
    )


def cpu_ms_per_pod(run: FamilyRun) -> float:
    return 1000 * run.scheduler_cpu_s / max(run.bound, 1)


def side_by_side(nodes: int, runs: list[FamilyRun]) -> str:
    """One family's runs, one per scheduler, on one line."""
    fields = [f"{r.scheduler}_pods_per_s={r.pods_per_s:.1f}" for r in runs]
    fields += [f"{r.scheduler}_cpu_ms_per_pod={cpu_ms_per_pod(r):.1f}" for r in runs]
    fields += [f"{r.scheduler}_bound={r.bound}/{r.pods}" for r in runs]
    return f"schedulers nodes={nodes} family={runs[0].family} " + " ".join(fields)


def gang_line(nodes: int, run: GangRun) -> str:
    return (
        f"gang nodes={nodes} workers={run.size} bound={run.bound}/{run.size} bound_s={run.bound_s:.1f} "
        f"running={run.on_sample}/{run.on_sample} running_s={run.running_s:.1f} gang_nodes={run.nodes} "
        f"create_s={run.create_s:.1f} scheduler_cpu_s={run.scheduler_cpu_s:.1f} load={_load()}"
    )


def details(layout: Layout, run: FamilyRun, cluster: ScaleCluster) -> str:
    use = total_use(cluster.publisher_pids())
    return (
        f"  layout={layout.name} bound={run.bound}/{run.pods} create_s={run.create_s:.1f} "
        f"scheduler_cpu_s={run.scheduler_cpu_s:.1f} "
        f"scheduler_cpu_ms_per_pod={cpu_ms_per_pod(run):.1f} "
        f"apiserver_cpu_s={run.apiserver_cpu_s:.1f} publishers_cpu_s={run.publishers_cpu_s:.1f} "
        f"publishers_rss_mib={use.rss_bytes / MIB:.0f} running={run.running} "
        f"run_p50_ms={run.run_p50_ms:.0f} run_p99_ms={run.run_p99_ms:.0f} load={_load()}"
    )


def run_layouts(args: argparse.Namespace, cluster: ScaleCluster, nodes: int) -> Layout | None:
    """Every layout in turn, every family it serves once per scheduler; returns the last layout that serves
    vgpu (the gang's), if any."""
    named = args.schedulers != ["default"]
    gang_layout: Layout | None = None
    for k, name in enumerate(args.layouts):
        layout = LAYOUTS[name]
        if k > 0:
            cluster.set_layout(layout)
        print(describe_layout(cluster, layout, cluster.publish_s), flush=True)
        slices, devices = layout_shape(layout)
        for family in [f for f in args.families if f in layout.serves]:
            count = max(1, round(PER_NODE[family] * nodes * args.scale_pods))
            wants = family_wants(family, count, seed=args.seed)
            runs = []
            for scheduler in args.schedulers:
                run = run_family(
                    cluster, family, wants, budget_s=args.budget, scheduler=SCHEDULERS[scheduler]
                )
                print(line(nodes, devices * nodes, slices, run, named=named), flush=True)
                print(details(layout, run, cluster), flush=True)
                runs.append(run)
            if len(runs) > 1:
                print(side_by_side(nodes, runs), flush=True)
        if "vgpu" in layout.serves:
            gang_layout = layout
    return gang_layout


def run_nodes(
    args: argparse.Namespace, nodes: int, binaries: Binaries, volcano_binaries: VolcanoBinaries | None
) -> None:
    """One control plane with `nodes` nodes: the layouts' runs, then (with Volcano) the gang."""
    with tempfile.TemporaryDirectory(prefix="tsc-") as tmp:
        first = LAYOUTS[args.layouts[0]]
        with scale_cluster(
            root=Path(tmp), binaries=binaries, nodes=nodes, sample=min(args.sample, nodes), layout=first
        ) as cluster:
            k8s.CoreV1Api(cluster.api).create_namespace(
                k8s.V1Namespace.model_validate({"metadata": {"name": NAMESPACE}})
            )
            wait_for_service_account(cluster.api, NAMESPACE)
            if volcano_binaries is not None:
                Volcano(plane=cluster.plane, binaries=volcano_binaries).start()
            gang_layout = run_layouts(args, cluster, nodes)
            if volcano_binaries is None:
                return
            if gang_layout is None:
                print("# gang: skipped, no layout of this run serves vgpu", flush=True)
                return
            if gang_layout.name != args.layouts[-1]:
                cluster.set_layout(gang_layout)
            print(gang_line(nodes, run_gang(cluster, args.gang, budget_s=args.budget)), flush=True)


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
    parser.add_argument(
        "--schedulers",
        type=lambda t: _csv(t, tuple(SCHEDULERS)),
        default=["default"],
        help="who places each family's pods, one run each in this order; volcano adds the gang phase",
    )
    parser.add_argument("--gang", type=int, default=64, help="workers of the Volcano gang (vgpu claims)")
    parser.add_argument("--smoke", action="store_true", help="3 nodes, vgpu only, a few pods (make test)")
    args = parser.parse_args(argv)
    if args.smoke:
        args.nodes, args.sample, args.scale_pods, args.gang = [3], 1, 0.2, 4
        args.layouts, args.families = ["vgpu-only"], ["vgpu"]
    configure(level="warning")
    binaries = ensure_built(allow_build=True)
    # Named before any control plane starts: a missing Volcano build fails at once, saying how to make it.
    volcano_binaries = ensure_volcano_built() if "volcano" in args.schedulers else None
    named = args.schedulers != ["default"]
    started = time.monotonic()
    print(
        f"# bench-scale: nodes={args.nodes} families={args.families} layouts={args.layouts} "
        f"sample={args.sample} seed={args.seed}"
        + (f" schedulers={args.schedulers} gang={args.gang}" if named else "")
        + f" load={_load()}",
        flush=True,
    )
    for nodes in args.nodes:
        run_nodes(args, nodes, binaries, volcano_binaries)
    print(f"# bench-scale done in {time.monotonic() - started:.0f} s, load={_load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
