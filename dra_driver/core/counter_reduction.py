"""The fewest counter consumptions that exclude exactly what a GPU's full counter model excludes (pure).

The families describe each device's use of its GPU honestly: memory, multiprocessors, every engine kind and
the memory slices a MIG placement covers. kube-scheduler pays for that on every node it filters for every pod:
it validates each consumption against the counter set and, per pool, totals what the allocated devices hold
(1.37: `validateDeviceCounterConsumption`, `checkAvailableCounters`). Most of those counters never decide
anything: two H100 placements that share no memory slice never run out of multiprocessors or decoders.

A set of devices can be allocated together when their summed consumption fits the counter set. When every
set of devices that is infeasible contains an infeasible *pair* (true for every GPU Tessera knows: MIG
placements conflict through shared memory slices, the GPU-wide devices through everything), the feasible sets
are exactly those without a conflicting pair. Any consumption that keeps every conflicting pair over the
counter set's limits then keeps every feasible set feasible and every infeasible one infeasible. This module
drops consumptions greedily under that rule: first whole counters that no pair needs (the aggregates), then
single device-counter entries. What is left on an H100: a placement holds its memory slices (and the one
OFA where it asks for it), a whole GPU, vgpu or MPS device holds every memory slice, 73 consumptions
instead of 223 (slice 7 goes too: every placement that covers it also covers slice 6).
Where a GPU's model has an infeasible set of three or more pairwise-compatible devices, nothing is
dropped. A counter set with no conflicting pair loses every consumption: it can never bind.
"""

from __future__ import annotations

from collections.abc import Sequence
from fractions import Fraction
from functools import lru_cache
from itertools import combinations

from dra_driver.core.families.base import Json
from dra_driver.vocabulary.quantity import parse_quantity

# (counter names), (limits), per device: ((counter index, amount), ...) — the hashable key of one GPU's model
_Usage = tuple[tuple[int, Fraction], ...]
_Model = tuple[tuple[str, ...], tuple[Fraction, ...], tuple[_Usage, ...]]


def _fits(limits: Sequence[Fraction], usages: Sequence[_Usage]) -> bool:
    totals = [Fraction(0)] * len(limits)
    for usage in usages:
        for k, amount in usage:
            totals[k] += amount
    return all(t <= limit for t, limit in zip(totals, limits, strict=True))


def _only_pairs_bind(
    limits: Sequence[Fraction], usages: Sequence[_Usage], conflicts: set[tuple[int, int]]
) -> bool:
    """Whether every set of pairwise-compatible devices fits (so the infeasible sets are those with a
    conflicting pair). Walks the pairwise-compatible sets depth first, carrying the running totals."""
    n = len(usages)
    compatible = [
        {j for j in range(n) if j != i and (min(i, j), max(i, j)) not in conflicts} for i in range(n)
    ]

    def walk(totals: list[Fraction], candidates: list[int]) -> bool:
        for a, j in enumerate(candidates):
            grown = list(totals)
            for k, amount in usages[j]:
                grown[k] += amount
            if any(t > limit for t, limit in zip(grown, limits, strict=True)):
                return False
            if not walk(grown, [c for c in candidates[a + 1 :] if c in compatible[j]]):
                return False
        return True

    return walk([Fraction(0)] * len(limits), [i for i in range(n) if usages[i]])


@lru_cache(maxsize=64)
def _reduced(model: _Model) -> tuple[frozenset[int], ...] | None:
    """Per device, the counter indices it keeps; None where the model cannot be reduced safely."""
    names, limits, usages = model
    n = len(usages)
    conflicts = {(i, j) for i, j in combinations(range(n), 2) if not _fits(limits, (usages[i], usages[j]))}
    if not _only_pairs_bind(limits, usages, conflicts):
        return None
    kept = [dict(u) for u in usages]

    def still_excludes(pairs: Sequence[tuple[int, int]]) -> bool:
        return all(not _fits(limits, (tuple(kept[i].items()), tuple(kept[j].items()))) for i, j in pairs)

    # Whole counters first, the most consumed ones (aggregates) before the rest, so what is left reads as
    # the placement's own resources rather than an arbitrary survivor.
    consumers = {k: sum(1 for u in kept if k in u) for k in range(len(names))}
    for k in sorted(consumers, key=lambda k: (-consumers[k], names[k])):
        removed = {i: kept[i].pop(k) for i in range(n) if k in kept[i]}
        touched = [p for p in conflicts if p[0] in removed or p[1] in removed]
        if not still_excludes(touched):
            for i, amount in removed.items():
                kept[i][k] = amount
    for i in range(n):
        for k in sorted(kept[i], key=lambda k: names[k]):
            amount = kept[i].pop(k)
            if not still_excludes([p for p in conflicts if i in p]):
                kept[i][k] = amount
    return tuple(frozenset(u) for u in kept)


def _consumption(device: Json, set_name: str) -> Json | None:
    for use in device.get("consumesCounters") or ():
        if use["counterSet"] == set_name:
            return dict(use["counters"])
    return None


def reduce_counters(counter_set: Json, devices: Sequence[Json]) -> tuple[Json | None, tuple[Json, ...]]:
    """One GPU's counter set and devices, with every consumption dropped that excludes nothing on its own.

    Returns the counter set with only the counters still consumed (None when none is), and the devices with
    their `consumesCounters` for this set trimmed (removed when empty); consumptions of other sets and every
    other field are kept as they are."""
    set_name = str(counter_set["name"])
    limits_wire: Json = counter_set["counters"]
    names = tuple(sorted(limits_wire))
    index = {name: k for k, name in enumerate(names)}
    limits = tuple(parse_quantity(str(limits_wire[name]["value"])).value for name in names)
    uses = [_consumption(d, set_name) for d in devices]
    usages = tuple(
        tuple(sorted((index[c], parse_quantity(str(v["value"])).value) for c, v in (u or {}).items()))
        for u in uses
    )
    kept = _reduced((names, limits, usages))
    if kept is None:
        return counter_set, tuple(devices)
    out: list[Json] = []
    for d, u, keep in zip(devices, uses, kept, strict=True):
        if u is None:
            out.append(d)
            continue
        mine = {name: v for name, v in u.items() if index[name] in keep}
        uses_left = [
            c if c["counterSet"] != set_name else {**c, "counters": mine}
            for c in d["consumesCounters"]
            if c["counterSet"] != set_name or mine
        ]
        trimmed = {k: (uses_left if k == "consumesCounters" else v) for k, v in d.items()}
        if not uses_left:
            del trimmed["consumesCounters"]
        out.append(trimmed)
    still = {k for keep in kept for k in keep}
    if not still:
        return None, tuple(out)
    reduced_set = {**counter_set, "counters": {n: limits_wire[n] for n in names if index[n] in still}}
    return reduced_set, tuple(out)
