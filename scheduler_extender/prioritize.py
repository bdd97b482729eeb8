"""One `prioritize` call of the scheduler extender API, answered from what the extender has seen (pure: the
call's body and the watched objects in, the answer out).

kube-scheduler sends `ExtenderArgs` (`Pod`, and `NodeNames` with `nodeCacheCapable: true`, else `Nodes`, a
NodeList) and takes a `HostPriorityList` (`[{"Host": …, "Score": 0..10}]`). A pod that asks for no Tessera
GPU gets 0 everywhere: this extender then changes nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from typing import Any

from dra_driver.vocabulary.errors import ConfigError
from scheduler_extender.cluster_view import Obj, demand_of, held, mix_of, node_gpus, read_slices
from scheduler_extender.fragmentation import growth, node_scores

ClaimLookup = Callable[[str, str], Obj | None]
MAX_NODES = 20_000


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


def prioritize(
    args: Mapping[str, Any], *, slices: Iterable[Obj], claims: Iterable[Obj], lookup: ClaimLookup
) -> list[dict[str, Any]]:
    """The HostPriorityList for one ExtenderArgs body."""
    names = node_names(args)
    nodes = read_slices(slices)
    own = pod_claims(_map(args.get("Pod")), lookup)
    if not own:
        return [{"Host": n, "Score": 0} for n in names]
    holdings = [h for h in (held(c, nodes) for c in claims) if h]
    by_node: dict[str, list[Any]] = {}
    for claim_holdings in holdings:
        for h in claim_holdings:
            by_node.setdefault(h.node, []).append(h)
    mix = mix_of(holdings)
    grown: dict[str, float | None] = {}
    for name in names:
        node = nodes.get(name)
        demand = None if node is None else demand_of(own, gpu_memory=node.gpu_memory())
        if node is None or demand is None:
            grown[name] = None
            continue
        # the pod's own shape counts in the mix too: on an empty cluster it is the only one known
        grown[name] = growth(
            node_gpus(node, by_node.get(name, ())), demand, {**mix, demand: mix.get(demand, 0) + 1}
        )
    if all(g is None for g in grown.values()):
        return [{"Host": n, "Score": 0} for n in names]
    scores = node_scores(grown)
    return [{"Host": n, "Score": scores[n]} for n in names]
