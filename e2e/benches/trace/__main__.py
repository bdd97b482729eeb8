"""`python -m e2e.benches.trace` (`make bench-trace`): a production trace of a GPU-sharing cluster replayed on
the real control plane with the stock kube-scheduler, as the FGD paper replays it (e2e.benches.trace.replay),
and how many GPUs Tessera leaves unallocated as the requests arrive.

The trace's nodes are simulated Tessera nodes publishing real ResourceSlices (e2e.benches.trace.cluster), its
pods are Pods with claims (e2e.benches.trace.kube_objects). Per seed it prints the curve (unallocated % each
time the arrived requests pass another 10 % of the cluster's GPUs), then one line:

    seed=42 tried=… placed=… at100=…% at130=…% wall_s=… pods_placed_per_s=… scheduler_cpu_ms_per_pod=…

and at the end the median over the seeds beside the paper's published figures. docs/performance.md explains
every field and how to replay your own cluster's trace.

`--sample F`: a proportional sample of the cluster, F of its nodes (stratified by GPU model and count) and F
of its pods. `--smoke` (`make bench-trace SMOKE=1`, which `make test` runs): the slice of the trace kept
beside this file (2 nodes, 4 pods; seed 45), whose figures a test counts by hand.
"""

from __future__ import annotations

import argparse
import os
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

from dra_driver.io.logs import configure
from e2e.benches.trace.cluster import trace_cluster
from e2e.benches.trace.extender import REPO, SHIPPED, extender_stats
from e2e.benches.trace.gpu_models import model
from e2e.benches.trace.inputs import add_trace_arguments, load_trace, smoke_inputs
from e2e.benches.trace.replay import MARKS, Point, arrival_order, at, curve, median_at
from e2e.benches.trace.replay_run import SeedRun, replay_seed
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.flags import load_scheduler_configuration

# The paper's figures for openb_pod_list_default.csv: unallocated GPU % at 100 % / 130 % arrived, median of
# seeds 42-51 in its own simulator (../shared/traces/README.md).
PUBLISHED = (
    ("Random", 13.75, 12.62),
    ("DotProd", 9.45, 9.20),
    ("GPU clustering", 8.42, 8.21),
    ("GPU packing", 8.20, 7.94),
    ("Best fit", 7.09, 6.89),
    ("FGD", 4.77, 4.60),
)


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def curve_line(points: Sequence[Point]) -> str:
    return "  curve " + " ".join(f"{p.mark}%={p.unallocated_pct:.2f}" for p in points)


def point_line(p: Point) -> str:
    return (
        f"arrived>={p.mark}% tried={p.tried} placed={p.placed} arrived={p.arrived_pct:.2f}% "
        f"unallocated={p.unallocated_pct:.2f}%"
    )


def seed_lines(run: SeedRun, points: Sequence[Point]) -> list[str]:
    lines = [f"  {point_line(p)}" for p in points]
    tried = len(run.outcomes)
    per_s = run.placed / run.wall_s if run.wall_s > 0 else float("nan")
    at100, at130 = at(points, 100), at(points, 130)
    lines.append(curve_line(points))
    lines.append(
        f"seed={run.seed} tried={tried} placed={run.placed} "
        f"at100={_pct(at100.unallocated_pct if at100 else None)} "
        f"at130={_pct(at130.unallocated_pct if at130 else None)} wall_s={run.wall_s:.0f} "
        f"pods_placed_per_s={per_s:.1f} "
        f"scheduler_cpu_ms_per_pod={1000 * run.scheduler_cpu_s / max(tried, 1):.1f} "
        f"claims_s={run.claims_s:.0f} stuck={run.stuck}"
    )
    return lines


def _load() -> str:
    return " ".join(f"{x:.2f}" for x in os.getloadavg())


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.trace", description=__doc__)
    add_trace_arguments(parser)
    parser.add_argument(
        "--settings", type=Path, help="a NodeSettings file every node publishes with (default: the defaults)"
    )
    parser.add_argument(
        "--scheduler-config",
        type=Path,
        help="a KubeSchedulerConfiguration kube-scheduler runs with (default: the release's defaults), "
        "e.g. deploy/scheduler/kube-scheduler-config.yaml",
    )
    parser.add_argument(
        "--extender",
        action="store_true",
        help="run Tessera's scheduler extender beside kube-scheduler with "
        "deploy/scheduler/kube-scheduler-extender-config.yaml as it ships (with --scheduler-config: that "
        "configuration plus the shipped extender stanza)",
    )
    args = parser.parse_args(argv)
    smoke_inputs(args)
    configure(level="warning")
    nodes, pods = load_trace(parser, args)
    scheduler_configuration = None
    if args.scheduler_config is not None:
        try:
            scheduler_configuration = load_scheduler_configuration(args.scheduler_config)
        except ControlPlaneError as e:
            parser.error(f"{e} (SCHEDULER_CONFIG=<file>)")
    # with the extender and no file of the user's: the shipped one, whole (e2e.benches.trace.extender)
    config_name = args.scheduler_config or (SHIPPED.relative_to(REPO) if args.extender else "default")
    models = [model(m) for m in sorted({n.model for n in nodes if n.gpus})]
    cluster_milli = sum(n.gpu_milli for n in nodes)
    gpus = Counter(n.model for n in nodes for _ in range(n.gpus))
    binaries = ensure_built(allow_build=True)
    started = time.monotonic()
    print(
        f"# bench-trace: trace={args.trace.name} pods={len(pods)} nodes={len(nodes)} "
        f"gpus={sum(gpus.values())} sample={args.sample:g} seeds={args.seeds} "
        f"settings={args.settings or 'default'} scheduler_config={config_name} "
        f"extender={'yes' if args.extender else 'no'} "
        f"load={_load()}",
        flush=True,
    )
    print("# gpus " + " ".join(f"{m}={n}" for m, n in sorted(gpus.items())), flush=True)
    runs: list[list[Point]] = []
    for seed in args.seeds:
        # a fresh control plane per seed: emptying a loaded one of thousands of pods and claims times out
        with (
            tempfile.TemporaryDirectory(prefix="ttr-") as tmp,
            trace_cluster(
                root=Path(tmp),
                binaries=binaries,
                nodes=nodes,
                settings=args.settings,
                scheduler_configuration=scheduler_configuration,
                extender=args.extender,
            ) as cluster,
        ):
            print(f"cluster nodes={len(nodes)} publish_s={cluster.publish_s:.0f}", flush=True)
            arrivals = arrival_order(pods, seed=seed, cluster_milli=cluster_milli)
            print(f"seed={seed} pods={len(arrivals)} padded={len(arrivals) - len(pods)}", flush=True)
            run = replay_seed(
                cluster,
                arrivals,
                seed=seed,
                models=models,
                cluster_milli=cluster_milli,
                on_point=lambda p: print(f"  so far {point_line(p)}", flush=True),
            )
            if cluster.extender_port is not None:
                stats = extender_stats(cluster.extender_port)
                print("extender " + " ".join(f"{k}={v}" for k, v in sorted(stats.items())), flush=True)
        points = curve(run.outcomes, cluster_milli=cluster_milli)
        runs.append(points)
        for line in seed_lines(run, points):
            print(line, flush=True)
    medians = {mark: median_at(runs, mark) for mark in MARKS}
    print(
        f"trace median seeds={len(runs)} at100={_pct(medians[100])} at130={_pct(medians[130])}",
        flush=True,
    )
    print("  curve " + " ".join(f"{m}%={_pct(v)}" for m, v in medians.items()), flush=True)
    for name, a100, a130 in PUBLISHED:
        print(f"  published {name}: at100={a100:.2f}% at130={a130:.2f}% (the paper's simulator)", flush=True)
    print(f"# bench-trace done in {time.monotonic() - started:.0f} s, load={_load()}", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
