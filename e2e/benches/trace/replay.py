"""The replay protocol's arithmetic (pure): which pods arrive in which order, how a proportional sample of a
cluster is drawn, and the curve of unallocated GPUs against arrived requests.

The protocol is the FGD paper's (Weng et al., USENIX ATC '23; ../shared/traces/README.md): pods sorted by
name, shuffled with the seed, then padded with pods of the trace drawn with replacement until the requested
GPUs reach 130 % of the cluster's; each is tried once, in order, and one that does not fit is dropped.
Arrived % is the GPU-milli requested by every pod tried so far (placed or not) over the cluster's;
unallocated % is 100 minus the GPU-milli placed over the cluster's. Python's random stands in for the
paper's Go source, so a seed here does not give the paper's order for that seed, only one like it."""

from __future__ import annotations

import random
import statistics
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

from e2e.benches.trace.records import TraceError, TraceNode, TracePod

PAD_PERCENT = 130
MARKS = tuple(range(10, PAD_PERCENT + 1, 10))  # the curve's points, in arrived %


@dataclass(frozen=True, slots=True)
class Arrival:
    """The `index`-th pod tried: a trace pod, under a name of its own (a padded copy is `<name>-r<k>`)."""

    index: int
    name: str
    pod: TracePod


def arrival_order(
    pods: Sequence[TracePod], *, seed: int, cluster_milli: int, pad_percent: int = PAD_PERCENT
) -> list[Arrival]:
    """The pods in the order they are tried: sorted by name, shuffled by `seed`, padded to `pad_percent` of
    `cluster_milli` by draws (same generator) from the sorted trace. A trace already past it is not cut."""
    ordered = sorted(pods, key=lambda p: p.name)
    rng = random.Random(seed)
    shuffled = list(ordered)
    rng.shuffle(shuffled)
    arrivals = [Arrival(k, p.name, p) for k, p in enumerate(shuffled)]
    goal = pad_percent * cluster_milli  # in hundredths of a milli, so no division rounds
    total = 100 * sum(p.request_milli for p in shuffled)
    if total < goal and not any(p.request_milli for p in ordered):
        raise TraceError("no pod of the trace asks for a GPU, so it cannot be padded to the cluster's GPUs")
    copies: dict[str, int] = {}
    while total < goal:
        pod = rng.choice(ordered)
        copies[pod.name] = copies.get(pod.name, 0) + 1
        arrivals.append(Arrival(len(arrivals), f"{pod.name}-r{copies[pod.name]}", pod))
        total += 100 * pod.request_milli
    return arrivals


@dataclass(frozen=True, slots=True)
class Point:
    """The state right after the first pod whose arrival reached `mark` % of the cluster's GPUs."""

    mark: int
    tried: int  # pods tried so far, that one included
    placed: int
    arrived_pct: float
    unallocated_pct: float


def curve(
    outcomes: Iterable[tuple[int, bool]], *, cluster_milli: int, marks: Sequence[int] = MARKS
) -> list[Point]:
    """`outcomes`: (requested GPU-milli, placed?) of each pod in the order tried. One point per mark that
    the arrivals reach (in order), none for a mark they never reach."""
    if cluster_milli <= 0:
        raise TraceError("the cluster has no GPUs: arrived and unallocated % are not defined")
    points: list[Point] = []
    pending = sorted(marks)
    arrived = allocated = placed = 0
    for tried, (request, fitted) in enumerate(outcomes, start=1):
        arrived += request
        if fitted:
            placed += 1
            allocated += request
        while pending and 100 * arrived >= pending[0] * cluster_milli:
            points.append(
                Point(
                    mark=pending.pop(0),
                    tried=tried,
                    placed=placed,
                    arrived_pct=100 * arrived / cluster_milli,
                    unallocated_pct=100 - 100 * allocated / cluster_milli,
                )
            )
    return points


def at(points: Sequence[Point], mark: int) -> Point | None:
    return next((p for p in points if p.mark == mark), None)


def median_at(runs: Sequence[Sequence[Point]], mark: int) -> float | None:
    """The median over runs of unallocated % at `mark`; None when a run never reached it."""
    values = [p.unallocated_pct for run in runs if (p := at(run, mark)) is not None]
    return statistics.median(values) if values and len(values) == len(runs) else None


def _shares(counts: dict[tuple[str, int], int], total: int) -> dict[tuple[str, int], int]:
    """`total` split over the groups in proportion to `counts`, by largest remainder (ties: larger group)."""
    whole = sum(counts.values())
    exact = {g: total * n / whole for g, n in counts.items()}
    shares = {g: int(e) for g, e in exact.items()}
    rest = total - sum(shares.values())
    for g in sorted(counts, key=lambda g: (-(exact[g] - shares[g]), -counts[g], g))[:rest]:
        shares[g] += 1
    return shares


def sample_cluster(
    nodes: Sequence[TraceNode], pods: Sequence[TracePod], *, fraction: float, seed: int = 0
) -> tuple[list[TraceNode], list[TracePod]]:
    """A proportional sample: `fraction` of the nodes, stratified by (model, GPUs per node) so that the
    mix of node shapes stays as in the cluster, and the same fraction of the pods, a simple random sample;
    both drawn with `seed` from the lists sorted by name. `fraction` 1 returns everything."""
    if not 0 < fraction <= 1:
        raise TraceError(f"sample fraction {fraction} is out of range; give 0 < fraction <= 1")
    rng = random.Random(seed)
    by_shape: dict[tuple[str, int], list[TraceNode]] = {}
    for n in sorted(nodes, key=lambda n: n.name):
        by_shape.setdefault((n.model, n.gpus), []).append(n)
    want = max(1, round(fraction * len(nodes)))
    shares = _shares({g: len(ns) for g, ns in by_shape.items()}, want)
    picked = [n for g, ns in sorted(by_shape.items()) for n in rng.sample(ns, shares[g])]
    ordered_pods = sorted(pods, key=lambda p: p.name)
    chosen = rng.sample(ordered_pods, round(fraction * len(pods)))
    return sorted(picked, key=lambda n: n.name), sorted(chosen, key=lambda p: p.name)
