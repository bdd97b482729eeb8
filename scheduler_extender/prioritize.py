"""One `prioritize` call of the scheduler extender API, answered from what the extender has seen (pure: the
call's body and the watched objects in, the answer out).

kube-scheduler sends `ExtenderArgs` (`Pod`, and `NodeNames` with `nodeCacheCapable: true`, else `Nodes`, a
NodeList) and takes a `HostPriorityList` (`[{"Host": …, "Score": 0..10}]`). A pod that asks for no Tessera
GPU gets 0 everywhere (this extender then changes nothing) unless `Scoring.cpu_pods`: then it goes where its
CPU and memory strand the fewest GPUs.

Two verbs, configured as two extenders of one service (deploy/scheduler/kube-scheduler-extender-config.yaml):
`prioritize`, the fragmentation score; `fill`, the tie-break between the nodes `prioritize` scores highest
(fragmentation.fill_scores: the fullest node once the pod is placed), 0 everywhere for a whole-GPU pod.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Any, Literal, get_args

from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.cluster_view import Obj, demand_of, held, node_gpus, read_slices
from scheduler_extender.fragmentation import (
    Demand,
    Gpu,
    Mix,
    Whole,
    fill_scores,
    free_after,
    growth,
    node_scores,
)
from scheduler_extender.node_room import requests_of, rooms

ClaimLookup = Callable[[str, str], Obj | None]
MAX_NODES = 20_000
Verb = Literal["prioritize", "fill"]
VERBS: tuple[Verb, ...] = get_args(Verb)


@dataclass(frozen=True, slots=True)
class Scoring:
    """How the extender scores (docs/scheduling.md): against `mix`, counting each node's CPU and memory
    left where its Node is seen; `unit`: node_scores' (None: min-max); `cpu_pods`: pods without a GPU too."""

    mix: Mix
    unit: float | None = None
    cpu_pods: bool = False


def _map(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def node_names(args: Mapping[str, Any]) -> list[str]:
    """The candidate nodes of an ExtenderArgs body, by name; ConfigError when it names none readably."""
    names = args.get("NodeNames")
    if names is None:
        items = _map(args.get("Nodes")).get("items")
        if isinstance(items, list):
            names = [_map(_map(n).get("metadata")).get("name") for n in items]
    if not isinstance(names, list) or not all(isinstance(n, str) for n in names):
        raise ConfigError("ExtenderArgs needs NodeNames (a list of names) or Nodes (a NodeList)")
    if len(names) > MAX_NODES:
        raise ConfigError(f"ExtenderArgs names {len(names)} nodes, more than {MAX_NODES}")
    return names


def pod_claims(pod: Mapping[str, Any], lookup: ClaimLookup) -> list[Obj]:
    """The pod's ResourceClaims that the extender has seen (by name, or for a template by the name its
    status gives)."""
    metadata, spec, status = _map(pod.get("metadata")), _map(pod.get("spec")), _map(pod.get("status"))
    namespace = str(metadata.get("namespace") or "default")
    generated = {
        str(_map(s).get("name")): _map(s).get("resourceClaimName")
        for s in status.get("resourceClaimStatuses") or []
        if isinstance(s, Mapping)
    }
    claims: list[Obj] = []
    for raw in spec.get("resourceClaims") or []:
        ref = _map(raw)
        name = ref.get("resourceClaimName") or generated.get(str(ref.get("name")))
        claim = lookup(namespace, name) if isinstance(name, str) else None
        if claim is not None:
            claims.append(claim)
    return claims


def no_preference(names: Iterable[str]) -> list[dict[str, Any]]:
    """The HostPriorityList that changes nothing: 0 everywhere."""
    return [{"Host": n, "Score": 0} for n in names]


def unfilled(verb: Verb, demand: Demand | None) -> bool:
    """Whether `fill` answers no_preference for the pod before any growth is computed: a whole-GPU pod
    (chance places whole GPUs better than filling nodes up, docs/scheduling.md)."""
    return verb == "fill" and isinstance(demand, Whole)


def scores_of(
    verb: Verb,
    grown: Mapping[str, float | None],
    placed: Mapping[str, tuple[tuple[Gpu, ...], Demand | None]],
    *,
    unit: float | None,
) -> dict[str, int]:
    """Each node's 0-10 for `verb` from its growth and, for `fill`, its GPUs and the pod's demand there."""
    scores = node_scores(grown, unit=unit)
    if verb == "prioritize":
        return scores
    return fill_scores(scores, lambda name: free_after(*placed[name]))


def prioritize(
    args: Mapping[str, Any],
    *,
    slices: Iterable[Obj],
    claims: Iterable[Obj],
    lookup: ClaimLookup,
    scoring: Scoring,
    nodes: Iterable[Obj] = (),
    pods: Iterable[Obj] = (),
    verb: Verb = "prioritize",
) -> list[dict[str, Any]]:
    """The HostPriorityList of `verb` for one ExtenderArgs body; `nodes` and `pods` as node_room keeps
    them."""
    names = node_names(args)
    pod = _map(args.get("Pod"))
    own = pod_claims(pod, lookup)
    if not own and not scoring.cpu_pods:
        return no_preference(names)
    gpus_of = read_slices(slices)
    by_node: dict[str, list[Any]] = {}
    for claim in claims:
        for h in held(claim, gpus_of):
            by_node.setdefault(h.node, []).append(h)
    room_of = rooms(nodes, pods)
    cpu, memory = requests_of(pod)
    grown: dict[str, float | None] = {}
    placed: dict[str, tuple[tuple[Gpu, ...], Demand | None]] = {}
    for name in names:
        node = gpus_of.get(name)
        demand = None if node is None or not own else demand_of(own, node=node)
        if own and demand is None:  # not a node of Tessera's GPUs, or a request not weighed
            grown[name] = None
            continue
        if unfilled(verb, demand):
            return no_preference(names)
        gpus = () if node is None else node_gpus(node, by_node.get(name, ()))
        placed[name] = (gpus, demand)
        grown[name] = growth(gpus, demand, scoring.mix, room=room_of.get(name), cpu_milli=cpu, memory=memory)
    if all(g is None for g in grown.values()):
        return no_preference(names)
    scores = scores_of(verb, grown, placed, unit=scoring.unit)
    return [{"Host": n, "Score": scores[n]} for n in names]
