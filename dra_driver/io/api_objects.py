"""The API server's objects as plain JSON (what `rest_calls.RestCalls` sends and answers): the paths Tessera
calls them at, and a field read from an object whose shape is not trusted. Pure and light (no `kubernetes`
import), so a command can name a path before it decides to load the client."""

from __future__ import annotations

from typing import Any
from urllib.parse import quote

Json = dict[str, Any]

# The paths Tessera calls, as templates for `path` (tests/unit/deploy/test_rbac_calls.py reads the node
# plugin's calls from these)
NODES = "/api/v1/nodes"
NODE = "/api/v1/nodes/{name}"
PODS = "/api/v1/pods"
POD = "/api/v1/namespaces/{namespace}/pods/{name}"
EVENTS = "/api/v1/namespaces/{namespace}/events"
CLAIM = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}"
SLICES = "/apis/resource.k8s.io/v1/resourceslices"
SLICE = "/apis/resource.k8s.io/v1/resourceslices/{name}"


def path(template: str, **names: str) -> str:
    """`template` with each {name} filled in, quoted for a URL path segment."""
    return template.format(**{k: quote(v, safe="") for k, v in names.items()})


def field_at(obj: object, *keys: str) -> Any:
    """`obj[keys[0]][keys[1]]...`, or None where a level is missing or not an object (a tenant can shape
    part of what the API server answers, e.g. a claim's status)."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj
