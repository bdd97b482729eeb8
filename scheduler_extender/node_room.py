"""What each node has left of its CPU and memory, from the Nodes and Pods the extender watches (pure: dicts
in, values out).

kube-scheduler's own accounting, small: a node's allocatable `cpu` and `memory`, less the requests of
every pod bound to it (`spec.nodeName`) that has not finished (phase Succeeded or Failed). A pod's requests
are its containers' summed, or its largest init container's when that is larger, plus its overhead.
Objects are reduced as they arrive (`keep_node`, `keep_pod`): a view of every Pod of a cluster holds a few
numbers per Pod. Objects are untrusted: an unreadable quantity counts as 0, never raises.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from typing import Any

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import parse_quantity
from scheduler_extender.fragmentation import Room

Obj = Mapping[str, Any]
FINISHED = ("Succeeded", "Failed")


def _map(value: object) -> Obj:
    return value if isinstance(value, Mapping) else {}


def _list(value: object) -> list[Any]:
    return value if isinstance(value, list) else []


def _amount(value: object, scale: int) -> int:
    """A quantity times `scale` (1000: CPU in millicores, 1: memory in bytes), rounded up; 0 if unreadable."""
    try:
        return max(0, math.ceil(parse_quantity(value).value * scale))
    except ConfigError:
        return 0


def _requests(resources: object) -> tuple[int, int]:
    asks = _map(_map(resources).get("requests"))
    return _amount(asks.get("cpu"), 1000), _amount(asks.get("memory"), 1)


def requests_of(pod: Obj) -> tuple[int, int]:
    """The pod's CPU (millicores) and memory (bytes) as kube-scheduler counts them."""
    spec = _map(pod.get("spec"))
    cpu = memory = 0
    for container in _list(spec.get("containers")):
        c, m = _requests(_map(container).get("resources"))
        cpu, memory = cpu + c, memory + m
    for container in _list(spec.get("initContainers")):
        c, m = _requests(_map(container).get("resources"))
        cpu, memory = max(cpu, c), max(memory, m)
    overhead = _map(spec.get("overhead"))
    return cpu + _amount(overhead.get("cpu"), 1000), memory + _amount(overhead.get("memory"), 1)


def keep_node(node: Obj) -> Obj:
    """What the score reads of a Node: its name and allocatable CPU and memory."""
    allocatable = _map(_map(node.get("status")).get("allocatable"))
    return {
        "metadata": {"name": _map(node.get("metadata")).get("name")},
        "cpu": _amount(allocatable.get("cpu"), 1000),
        "memory": _amount(allocatable.get("memory"), 1),
    }


def keep_pod(pod: Obj) -> Obj | None:
    """What the score reads of a Pod: where it is bound and what it requests; None (not kept) while it is
    not bound and once it has finished."""
    node = _map(pod.get("spec")).get("nodeName")
    if not isinstance(node, str) or not node or _map(pod.get("status")).get("phase") in FINISHED:
        return None
    metadata = _map(pod.get("metadata"))
    cpu, memory = requests_of(pod)
    return {
        "metadata": {k: metadata.get(k) for k in ("namespace", "name")},
        "node": node,
        "cpu": cpu,
        "memory": memory,
    }


def _int(value: object) -> int:
    return value if isinstance(value, int) and not isinstance(value, bool) else 0


def rooms(nodes: Iterable[Obj], pods: Iterable[Obj]) -> dict[str, Room]:
    """Node name → what it has left, from kept Nodes and Pods (a pod on a node not seen is passed over)."""
    found = {
        str(_map(n.get("metadata")).get("name")): Room(
            cpu_milli=_int(n.get("cpu")), memory=_int(n.get("memory"))
        )
        for n in nodes
    }
    for pod in pods:
        room = found.get(str(pod.get("node")))
        if room is not None:
            found[str(pod.get("node"))] = room.less(_int(pod.get("cpu")), _int(pod.get("memory")))
    return found
