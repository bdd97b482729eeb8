"""`python -m e2e.benches.trace.levers` (`make bench-trace-offline`): the extender's levers on the offline
replay (e2e.benches.trace.offline), one line per lever and seed and a median per lever, in the time a real
run takes to start its control plane. The same protocol, order and sample as `make bench-trace`
(e2e.benches.trace.replay), so a lever's offline figure can stand beside its real one.

    lever=fgd-w10 seed=42 tried=… placed=… at100=…% at130=…%
    lever=fgd-w10 median seeds=3 at100=…% at130=…%

`--smoke` (`make bench-trace-offline SMOKE=1`): the slice beside the bench (2 nodes, 4 pods; seed 45), whose
figures the same hand count as the real bench's gives.
"""

from __future__ import annotations

import argparse
import statistics
import sys
from collections.abc import Sequence
from importlib import resources
from pathlib import Path
from typing import Any

from e2e.benches.trace.inputs import add_trace_arguments, load_trace, smoke_inputs
from e2e.benches.trace.offline import Lever, replay_offline
from e2e.benches.trace.records import Ask
from e2e.benches.trace.replay import arrival_order, at, curve
from scheduler_extender.fragmentation import Mix
from scheduler_extender.mix import parse_mix

SHIPPED = "nospread-u40-w120-fill1-dra10"  # deploy/scheduler/kube-scheduler-extender-config.yaml's lever


def shipped_mix() -> Mix:
    text = resources.files("scheduler_extender").joinpath("mixes/openb.csv").read_text(encoding="utf-8")
    return parse_mix(text, what="scheduler_extender/mixes/openb.csv")


def levers(mix: Mix, *, gpu_pod_share: float = 1.0) -> dict[str, Lever]:
    """The levers by name: kube-scheduler alone; a node at random among those that fit (no score: the paper's
    Random, a check of the model against its published figure); the extender as it was (GPUs alone, the
    mix learned from the pods placed, min-max scores); FGD's measure (CPU and memory counted) with min-max
    scores, or with a unit of growth per point (`u100`: 100 thousandths of a GPU) at several weights; the
    learned mix; pods without a GPU scored too (`cpupods`); and with kube-scheduler's spreading of CPU and
    memory turned off (`nospread`: NodeResourcesFit's and BalancedAllocation's scores disabled, as the
    shipped deploy/scheduler/kube-scheduler-extender-config.yaml does; `nospread-u40-w25` shipped before the
    fill score, `nospread-u2-w25` before that), without scoring CPU-only pods (`gpupods`), without
    DynamicResources' score (`nodra`), or keeping the spreading for CPU-only pods alone (`gpuprofile`, as
    a second scheduler profile for GPU pods would). `fgd-policy` is no configuration of kube-scheduler:
    FGD's own choice (the node of least growth, ties at random) for reference, with the allocator's
    placement inside the node, or FGD's own inside it too (`-fgd-inside`); `fgd-sigmoid` scores as FGD's
    simulator does (offline.sigmoid_score: `gpu_pod_share` the replayed pods' share that ask for a GPU),
    its choice inside the node too. `-best-fit`: a share goes to the node's fullest GPU that takes it (a
    device order republished by free capacity) instead of the first in the published order
    (e2e.benches.trace.offline.INSIDE). `pack`: NodeResourcesFit's MostAllocated in place of the spreading;
    `-few-gpus`/`-many-gpus`: a share's firstAvailable alternatives in another order than by name
    (offline.model_order), `-whole-…` whole-GPU claims listing one per model too; `-cpuN`: unit N for
    pods without a GPU (docs/performance.md, "What else was tried"). `nospread-u40-w120-fill1-dra10` (SHIPPED)
    ships since 2026-11-29 (docs/performance.md, "The fill score"): the extender at weight 120,
    DynamicResources at 10 and the extender's fill score as a second extender at 1, deciding in that order."""
    shipped: dict[str, Any] = {"weight": 25, "mix": mix, "unit": 2, "cpu_pods": True, "spread": False}
    found = [
        Lever("default"),
        Lever("random", spread=False, dra_score=False),
        Lever("gpu-only-minmax-w10", weight=10, cpu_memory=False, mix=None),
        Lever("fgd-minmax-w10", weight=10, mix=mix),
        *(Lever(f"fgd-u100-w{w}", weight=w, mix=mix, unit=100) for w in (2, 5, 10, 20)),
        *(Lever(f"fgd-u{u}-w10", weight=10, mix=mix, unit=u) for u in (50, 250)),
        Lever("fgd-learned-u100-w10", weight=10, mix=None, unit=100),
        Lever("fgd-cpupods-u100-w10", weight=10, mix=mix, unit=100, cpu_pods=True),
        *(Lever(f"fgd-cpupods-u{u}-w25", weight=25, mix=mix, unit=u, cpu_pods=True) for u in (2, 10)),
        *(Lever(f"nospread-u{u}-w25", **{**shipped, "unit": u}) for u in (1, 2, 5, 10, 25, 40, 50, 100)),
        Lever("nospread-u2-w5", weight=5, mix=mix, unit=2, cpu_pods=True, spread=False),
        Lever("nospread-gpupods-u2-w25", weight=25, mix=mix, unit=2, spread=False),
        Lever(
            "nospread-nodra-u2-w25", weight=25, mix=mix, unit=2, cpu_pods=True, spread=False, dra_score=False
        ),
        Lever("gpuprofile-u2-w25", weight=25, mix=mix, unit=2, spread=False, spread_cpu_pods=True),
        Lever("fgd-policy", weight=1, mix=mix, cpu_pods=True, fgd_policy=True),
        Lever("fgd-policy-fgd-inside", weight=1, mix=mix, cpu_pods=True, fgd_policy=True, inside="fgd"),
        Lever(
            "fgd-sigmoid",
            weight=1,
            mix=mix,
            cpu_pods=True,
            fgd_policy=True,
            inside="fgd",
            fgd_sigmoid=gpu_pod_share,
        ),
        Lever("fgd-policy-best-fit", weight=1, mix=mix, cpu_pods=True, fgd_policy=True, inside="best-fit"),
        Lever("nospread-u2-w25-best-fit", **shipped, inside="best-fit"),
        Lever("nospread-u2-w25-fgd-inside", **shipped, inside="fgd"),
        Lever("default-best-fit", inside="best-fit"),
        *(Lever(f"nospread-u{u}-w25", **{**shipped, "unit": u}) for u in (30, 35, 45, 60)),
        Lever("nospread-u40-w10", **{**shipped, "unit": 40, "weight": 10}),
        Lever("pack-u40-w25", **{**shipped, "unit": 40}, pack=True),
        *(
            Lever(f"nospread-u{u}-cpu{c}-w25", **{**shipped, "unit": u}, cpu_unit=c)
            for u, c in ((50, 40), (60, 40), (80, 40), (100, 40), (40, 10), (40, 2))
        ),
        Lever("nospread-nodra-u40-w25", **{**shipped, "unit": 40}, dra_score=False),
        *(
            Lever(f"nospread-u40-w25-{o}", **{**shipped, "unit": 40}, model_order=o)
            for o in ("few-gpus", "many-gpus")
        ),
        *(
            Lever(f"nospread-u40-w25-whole-{o}", **{**shipped, "unit": 40}, whole_order=o)
            for o in ("name", "few-gpus", "many-gpus")
        ),
        Lever(
            SHIPPED,
            **{**shipped, "unit": 40, "weight": 120},
            fill_weight=1,
            dra_weight=10,
        ),
    ]
    return {lever.name: lever for lever in found}


def _pct(value: float | None) -> str:
    return "-" if value is None else f"{value:.2f}%"


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.trace.levers", description=__doc__)
    add_trace_arguments(parser)
    parser.add_argument("--mix", type=Path, help="a mix of typical requests (CSV; default: the shipped one)")
    parser.add_argument("--levers", help="comma-separated lever names (default: all)")
    args = parser.parse_args(argv)
    smoke_inputs(args)
    nodes, pods = load_trace(parser, args)
    mix = parse_mix(args.mix.read_text(encoding="utf-8"), what=str(args.mix)) if args.mix else shipped_mix()
    # FGD weighs its typical requests by their share of all pods, those without a GPU among them
    asking = sum(1 for p in pods if p.ask is not Ask.CPU) / max(len(pods), 1)
    known = levers(mix, gpu_pod_share=asking)
    chosen = list(known) if not args.levers else [n.strip() for n in args.levers.split(",") if n.strip()]
    unknown = [n for n in chosen if n not in known]
    if unknown:
        parser.error(f"no lever {', '.join(unknown)}; the levers are {', '.join(known)}")
    cluster_milli = sum(n.gpu_milli for n in nodes)
    print(
        f"# bench-trace-offline: trace={args.trace.name} pods={len(pods)} nodes={len(nodes)} "
        f"gpus={cluster_milli // 1000} sample={args.sample:g} seeds={args.seeds} mix={args.mix or 'shipped'}",
        flush=True,
    )
    for name in chosen:
        at100: list[float] = []
        at130: list[float] = []
        for seed in args.seeds:
            arrivals = arrival_order(pods, seed=seed, cluster_milli=cluster_milli)
            outcomes = replay_offline(nodes, arrivals, known[name], seed=seed)
            points = curve(outcomes, cluster_milli=cluster_milli)
            p100, p130 = at(points, 100), at(points, 130)
            if p100 is not None:
                at100.append(p100.unallocated_pct)
            if p130 is not None:
                at130.append(p130.unallocated_pct)
            print(
                f"lever={name} seed={seed} tried={len(outcomes)} placed={sum(1 for _, p in outcomes if p)} "
                f"at100={_pct(p100.unallocated_pct if p100 else None)} "
                f"at130={_pct(p130.unallocated_pct if p130 else None)}",
                flush=True,
            )
        full = len(args.seeds)
        print(
            f"lever={name} median seeds={full} "
            f"at100={_pct(statistics.median(at100) if len(at100) == full else None)} "
            f"at130={_pct(statistics.median(at130) if len(at130) == full else None)}",
            flush=True,
        )
    return 0


if __name__ == "__main__":
    sys.exit(main())
