"""The trace a replay reads, as both entry points take it (`make bench-trace`, `make bench-trace-offline`):
the pod and node lists (CSV, ../shared/traces/openb by default), the seeds, a proportional sample of both, and
`--smoke`, the slice beside this file at seed 45."""

from __future__ import annotations

import argparse
from pathlib import Path

from e2e.benches.scale.fragmentation import parse_seeds
from e2e.benches.trace.records import TraceNode, TracePod, parse_nodes, parse_pods
from e2e.benches.trace.replay import sample_cluster

REPO = Path(__file__).resolve().parents[3]
# ../shared/traces/openb beside the checkout (or beside a folder above it, for a git worktree)
TRACES = next(
    (d / "shared" / "traces" / "openb" for d in REPO.parents if (d / "shared" / "traces" / "openb").is_dir()),
    REPO.parent / "shared" / "traces" / "openb",
)
DEFAULT_NODES = TRACES / "openb_node_list_gpu_node.csv"
DEFAULT_PODS = TRACES / "openb_pod_list_default.csv"
SLICE = Path(__file__).resolve().parent / "slice"


def add_trace_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--trace", type=Path, default=DEFAULT_PODS, help="the pod list (CSV)")
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="the node list (CSV)")
    parser.add_argument("--seeds", type=parse_seeds, default=[42, 43, 44], help="e.g. 42-44 or 42,47")
    parser.add_argument("--sample", type=float, default=1.0, help="fraction of nodes and pods (0 < F <= 1)")
    parser.add_argument("--sample-seed", type=int, default=0, help="the seed the sample is drawn with")
    parser.add_argument(
        "--smoke", action="store_true", help="the slice beside this file, seed 45 (make test)"
    )


def smoke_inputs(args: argparse.Namespace) -> None:
    """`--smoke`: the slice at seed 45, unsampled, whatever else was given."""
    if args.smoke:
        args.trace, args.nodes, args.seeds, args.sample = SLICE / "pods.csv", SLICE / "nodes.csv", [45], 1.0


def load_trace(
    parser: argparse.ArgumentParser, args: argparse.Namespace
) -> tuple[list[TraceNode], list[TracePod]]:
    """The nodes and pods the arguments name, sampled as asked; a missing file is the parser's error."""
    for path in (args.nodes, args.trace):
        if not path.is_file():
            parser.error(f"no trace file {path}: give TRACE=<pod list> and NODES=<node list> (CSV)")
    nodes = parse_nodes(args.nodes.read_text(encoding="utf-8"), what=str(args.nodes))
    pods = parse_pods(args.trace.read_text(encoding="utf-8"), what=str(args.trace))
    if args.sample < 1:
        nodes, pods = sample_cluster(nodes, pods, fraction=args.sample, seed=args.sample_seed)
    return nodes, pods
