"""The API server's objects as plain JSON (what `rest_calls.RestCalls` sends and answers): the paths Tessera
calls them at, and a field read from an object whose shape is not trusted. Pure and light (no `kubernetes`
import), so a command can name a path before it decides to load the client."""

from __future__ import annotations

from collections.abc import Mapping
from datetime import UTC, datetime
from typing import Any
from urllib.parse import quote

from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.excerpt import clip

Json = dict[str, Any]
MAX_MESSAGE_CHARS = 1024  # the API server keeps at most this much of an Event's message

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
CLAIMS = "/apis/resource.k8s.io/v1/resourceclaims"  # in every namespace
TEMPLATES = "/apis/resource.k8s.io/v1/resourceclaimtemplates"  # in every namespace
NAMESPACED_TEMPLATES = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates"
TEMPLATE = "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaimtemplates/{name}"
SECRETS = "/api/v1/namespaces/{namespace}/secrets"
SECRET = "/api/v1/namespaces/{namespace}/secrets/{name}"
MUTATING_WEBHOOK = "/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/{name}"
API_GROUPS = "/apis"  # discovery: the groups served


def path(template: str, **names: str) -> str:
    """`template` with each {name} filled in, quoted for a URL path segment. A name that quoting cannot keep
    one segment of its own (empty, `.` or `..`, which a URL resolves away) raises InvalidNameError: no
    object of the API server is named so, and the path would name another."""
    for key, value in names.items():
        if value in ("", ".", ".."):
            raise InvalidNameError(f"{key} {value!r} is no object's name: the path {template} needs one")
    return template.format(**{k: quote(v, safe="") for k, v in names.items()})


def field_at(obj: object, *keys: str) -> Any:
    """`obj[keys[0]][keys[1]]...`, or None where a level is missing or not an object (a tenant can shape
    part of what the API server answers, e.g. a claim's status)."""
    for key in keys:
        if not isinstance(obj, dict):
            return None
        obj = obj.get(key)
    return obj


def event_body(
    target: Mapping[str, str],
    *,
    reason: str,
    message: str,
    kind: str,
    component: str,
    host: str | None = None,
) -> Json:
    """A core/v1 Event about `target` (an object reference: apiVersion, kind, name, ...) as the API takes it:
    the node's, a claim's, a converted Pod's."""
    now = datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")
    return {
        "apiVersion": "v1",
        "kind": "Event",
        "metadata": {"generateName": f"{target['name'][:200]}.tessera-"},
        "involvedObject": dict(target),
        "reason": reason,
        "message": clip(message, MAX_MESSAGE_CHARS),
        "type": kind,
        "source": {"component": component, **({"host": host} if host else {})},
        "firstTimestamp": now,
        "lastTimestamp": now,
        "count": 1,
    }
