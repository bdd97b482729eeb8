"""The API calls a component makes through RestCalls, found in its source, and the RBAC permissions each
needs: what the charts' roles are checked against (tests/unit/deploy/test_rbac_calls.py for the node plugin,
tests/unit/admission/test_chart.py, tests/unit/scheduler_extender/test_chart.py).

A call is `rest.<method>(TEMPLATE ...)` on a receiver named `rest` or `_rest`, or an
`ApiSource(rest, TEMPLATE, ...)` (admission/watch.py: a list, then watches), where TEMPLATE is a module
constant holding an API path, the component's or dra_driver/io/api_objects.py's, possibly through
`path(TEMPLATE, ...)` and `+ "/sub"`. A call on a path the scan cannot read fails it.
"""

from __future__ import annotations

import ast
import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.vocabulary.names import DRIVER_NAME

ROOT = Path(__file__).resolve().parents[2]
API_OBJECTS = ROOT / "dra_driver" / "io" / "api_objects.py"

# RestCalls' methods: the HTTP method each sends, and whether it watches
REST_METHODS = {
    "get": ("GET", False),
    "watch": ("GET", True),
    "create": ("POST", False),
    "replace": ("PUT", False),
    "patch": ("PATCH", False),
    "delete": ("DELETE", False),
}
RECEIVERS = frozenset({"rest", "_rest"})
WATCH_SOURCE = "ApiSource"


@dataclass(frozen=True, slots=True)
class Permission:
    group: str
    resource: str
    verb: str
    resource_name: str | None = None


@dataclass(frozen=True, slots=True)
class RestCall:
    method: str  # HTTP
    template: str
    watched: bool
    where: str


def _templates(trees: Mapping[str, ast.AST]) -> dict[str, str]:
    """Module constants holding an API path template, by name: `NODE = "/api/v1/nodes/{name}"`."""
    return {
        target.id: n.value.value
        for tree in trees.values()
        for n in getattr(tree, "body", [])
        if isinstance(n, ast.Assign) and isinstance(n.value, ast.Constant) and isinstance(n.value.value, str)
        and re.fullmatch(r"/apis?(/[^ ]*)?", n.value.value)
        for target in n.targets
        if isinstance(target, ast.Name)
    }  # fmt: skip


def _rest_path(arg: ast.expr, templates: dict[str, str]) -> str | None:
    """The request path of a RestCalls call's first argument: TEMPLATE or path(TEMPLATE, ...), either
    + "/sub"."""
    if isinstance(arg, ast.Name):
        return templates.get(arg.id)
    if isinstance(arg, ast.Call) and isinstance(arg.func, ast.Name) and arg.func.id == "path" and arg.args:
        return _rest_path(arg.args[0], templates)
    if isinstance(arg, ast.BinOp) and isinstance(arg.op, ast.Add) and isinstance(arg.right, ast.Constant):
        base = _rest_path(arg.left, templates)
        return None if base is None else base + str(arg.right.value)
    return None


def _calls_in(tree: ast.AST) -> list[tuple[str, ast.expr, int]]:
    """(RestCalls method or WATCH_SOURCE, the path argument, line) of each call on a RestCalls receiver."""
    found = []
    # ApiSource's own calls take the path it was made with: its constructions are the calls
    generic = {
        id(inner)
        for c in ast.walk(tree)
        if isinstance(c, ast.ClassDef) and c.name == WATCH_SOURCE
        for inner in ast.walk(c)
    }
    for n in ast.walk(tree):
        if not isinstance(n, ast.Call) or id(n) in generic:
            continue
        if isinstance(n.func, ast.Name) and n.func.id == WATCH_SOURCE:
            assert len(n.args) >= 2, f"line {n.lineno}: {WATCH_SOURCE}(rest, TEMPLATE, ...)"
            found.append((WATCH_SOURCE, n.args[1], n.lineno))
            continue
        if not (isinstance(n.func, ast.Attribute) and n.func.attr in REST_METHODS and n.args):
            continue
        receiver = n.func.value
        name = receiver.attr if isinstance(receiver, ast.Attribute) else getattr(receiver, "id", None)
        if name in RECEIVERS:
            found.append((n.func.attr, n.args[0], n.lineno))
    return found


def find_rest_calls(sources: dict[str, str], *, templates_from: Sequence[str] = ()) -> list[RestCall]:
    """Each RestCalls call in `sources`, on a template they (or the modules in `templates_from`) name."""
    trees = {name: ast.parse(text) for name, text in sources.items()}
    templates = _templates({**trees, **{f"t{i}": ast.parse(t) for i, t in enumerate(templates_from)}})
    found = []
    for name, tree in trees.items():
        for method, arg, line in _calls_in(tree):
            template = _rest_path(arg, templates)
            assert template, f"{name}:{line}: name the path as a module constant template"
            if method == WATCH_SOURCE:
                found.append(RestCall("GET", template, False, f"{name}:{line}"))
                found.append(RestCall("GET", template, True, f"{name}:{line}"))
            else:
                http, watched = REST_METHODS[method]
                found.append(RestCall(http, template, watched, f"{name}:{line}"))
    return found


def sources_of(*paths: Path) -> dict[str, str]:
    """Each file (or each .py below a folder) by its path in the repository."""
    files = [f for p in paths for f in (sorted(p.rglob("*.py")) if p.is_dir() else [p])]
    return {str(f.relative_to(ROOT)): f.read_text(encoding="utf-8") for f in files if "proto" not in f.parts}


def permissions_of_request(method: str, path: str, *, watched: bool) -> set[Permission]:
    """What RBAC checks for one request; none for discovery (/api, /apis, a group's versions), which every
    authenticated user may read."""
    parts = path.strip("/").split("/")
    group, rest = ("", parts[2:]) if parts[0] == "api" else (parts[1] if len(parts) > 1 else "", parts[3:])
    if rest[:2] == ["namespaces", "{namespace}"]:
        rest = rest[2:]
    if not rest:
        return set()
    resource, named, sub = rest[0], len(rest) > 1, rest[2] if len(rest) > 2 else None
    verb = {
        ("GET", True): "get",
        ("GET", False): "watch" if watched else "list",
        ("POST", False): "create",
        ("PUT", True): "update",
        ("PATCH", True): "patch",
        ("DELETE", True): "delete",
        ("DELETE", False): "deletecollection",
    }[(method, named)]
    full = f"{resource}/{sub}" if sub else resource
    needed = {Permission(group, full, verb)}
    if full == "resourceclaims/status" and verb in ("update", "patch"):
        # status.devices: per-driver permission, for claims allocated on the plugin's own node (KEP-4817)
        needed.add(Permission(group, "resourceclaims/driver", f"associated-node:{verb}", DRIVER_NAME))
    return needed


def rest_permissions(sources: dict[str, str]) -> dict[Permission, list[str]]:
    """The permissions the RestCalls calls of `sources` need (templates also from api_objects.py), each with
    the calls that need it."""
    out: dict[Permission, list[str]] = {}
    for call in find_rest_calls(sources, templates_from=(API_OBJECTS.read_text(encoding="utf-8"),)):
        for p in permissions_of_request(call.method, call.template, watched=call.watched):
            out.setdefault(p, []).append(f"{call.method} {call.template} ({call.where})")
    return out


def granted_by(rules: Sequence[Mapping[str, Any]]) -> set[Permission]:
    """What a Role's or ClusterRole's rules grant, one Permission per group, resource, verb and name."""
    out: set[Permission] = set()
    for rule in rules:
        names = rule.get("resourceNames") or [None]
        for g in rule["apiGroups"]:
            for r in rule["resources"]:
                for v in rule["verbs"]:
                    out |= {Permission(g, r, v, n) for n in names}
    return out
