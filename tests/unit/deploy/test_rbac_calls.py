"""The node plugin's ClusterRole grants exactly the API calls kubelet_plugin/ makes: a new call without a rule
fails here, and so does a rule no call needs.

The calls are found in the source (every method of a kubernetes `*Api` class the plugin instantiates,
called or handed to `watch.stream`; and every `RestCalls` call on a path template named as a module constant,
the plugin's or dra_driver/io/api_objects.py's), and each is turned into (apiGroup, resource, verb) from the
client's own request path and HTTP method, or the template and the call, so no hand-kept table can drift from
the code.
"""

from __future__ import annotations

import ast
import inspect
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from dra_driver.vocabulary.names import DRIVER_NAME
from tests.support.rest_call_scan import (
    API_OBJECTS,
    Permission,
    RestCall,
    find_rest_calls,
    granted_by,
    permissions_of_request,
    rest_permissions,
)

ROOT = Path(__file__).resolve().parents[3]
PLUGIN = ROOT / "kubelet_plugin"
MANIFESTS = ROOT / "deploy" / "manifests" / "tessera.yaml"
ROLE = "tessera-node-plugin"
# The client's *Api classes by name; each is imported when first asked for (importing all of them at
# collection took seconds), and only those the plugin uses are.
API_NAMES = frozenset(n for n in dir(k8s) if re.fullmatch(r"[A-Z]\w*V\d\w*Api", n))


def api_class(name: str) -> Any:
    return getattr(k8s, name)


# Raw request paths the scan below cannot see through.
OPAQUE = ("call_api", "DynamicClient", "CustomObjectsApi")


@dataclass(frozen=True, slots=True)
class Call:
    api: str
    method: str
    watched: bool
    where: str


def _used_api_classes(tree: ast.AST) -> set[str]:
    names = {n.attr for n in ast.walk(tree) if isinstance(n, ast.Attribute)}
    names |= {n.id for n in ast.walk(tree) if isinstance(n, ast.Name)}
    return names & API_NAMES


def _streamed(tree: ast.AST) -> set[int]:
    """ids of the expressions handed to `<watch>.stream(...)`: a watch, not a list."""
    return {
        id(arg)
        for n in ast.walk(tree)
        if isinstance(n, ast.Call) and isinstance(n.func, ast.Attribute) and n.func.attr == "stream"
        for arg in n.args[:1]
    }


def find_calls(sources: dict[str, str]) -> list[Call]:
    trees = {name: ast.parse(text) for name, text in sources.items()}
    used = set().union(*(_used_api_classes(t) for t in trees.values()))
    calls: list[Call] = []
    for name, tree in trees.items():
        streamed = _streamed(tree)
        for n in ast.walk(tree):
            if not isinstance(n, ast.Attribute) or n.attr.startswith("_"):
                continue
            # an endpoint method has a request serializer; helpers such as close() do not
            owners = sorted(c for c in used if hasattr(api_class(c), f"_{n.attr}_serialize"))
            if not owners:
                continue
            assert len(owners) == 1, f"{name}:{n.lineno}: {n.attr} exists in {owners}; which API is it?"
            calls.append(Call(owners[0], n.attr, id(n) in streamed, f"{name}:{n.lineno}"))
    return calls


def permissions_of(call: Call) -> set[Permission]:
    serialize = getattr(api_class(call.api), f"_{call.method}_serialize")
    source = inspect.getsource(serialize)
    [method] = re.findall(r"method='(\w+)'", source)
    [path] = re.findall(r"resource_path='([^']+)'", source)
    return permissions_of_request(method, path, watched=call.watched)


def plugin_sources() -> dict[str, str]:
    return {
        str(p.relative_to(ROOT)): p.read_text(encoding="utf-8")
        for p in sorted(PLUGIN.rglob("*.py"))
        if "proto" not in p.parts
    }


def find_plugin_rest_calls(sources: dict[str, str]) -> list[RestCall]:
    """The plugin's RestCalls calls, on its templates and those dra_driver/io/api_objects.py names."""
    return find_rest_calls(sources, templates_from=(API_OBJECTS.read_text(encoding="utf-8"),))


def granted() -> set[Permission]:
    docs = [d for d in yaml.safe_load_all(MANIFESTS.read_text(encoding="utf-8")) if d]
    roles: list[dict[str, Any]] = [d for d in docs if d["kind"] == "ClusterRole"]
    assert [r["metadata"]["name"] for r in roles] == [ROLE]
    assert not [d for d in docs if d["kind"] in ("Role", "RoleBinding")], "only the ClusterRole is expected"
    return granted_by(roles[0]["rules"])


def needed() -> dict[Permission, list[str]]:
    out: dict[Permission, list[str]] = {}
    sources = plugin_sources()
    for call in find_calls(sources):
        for p in permissions_of(call):
            out.setdefault(p, []).append(f"{call.method} ({call.where})")
    for p, where in rest_permissions(sources).items():
        out.setdefault(p, []).extend(where)
    return out


def test_every_call_has_a_rule_and_every_rule_a_call() -> None:
    need, have = needed(), granted()
    missing = {p: need[p] for p in need if p not in have}
    assert not missing, f"kubelet_plugin makes calls the ClusterRole {ROLE} does not allow: {missing}"
    unused = have - set(need)
    assert not unused, f"the ClusterRole {ROLE} grants what no kubelet_plugin call needs: {unused}"


def test_the_scan_sees_the_plugins_known_calls() -> None:
    methods = {(c.method, c.watched) for c in find_calls(plugin_sources())}
    assert ("create_resource_slice", False) in methods
    assert ("list_resource_slice", True) in methods  # the publisher's watch
    assert ("patch_namespaced_resource_claim_status", False) in methods
    rest = {(c.method, c.template) for c in find_plugin_rest_calls(plugin_sources())}
    assert ("POST", "/api/v1/namespaces/{namespace}/events") in rest  # node and claim events
    assert ("GET", "/api/v1/nodes/{name}") in rest  # the node reader
    assert ("GET", "/apis/resource.k8s.io/v1/namespaces/{namespace}/resourceclaims/{name}") in rest


def test_a_rest_call_on_a_template_maps_to_its_rule() -> None:
    snippet = (
        'PODS = "/api/v1/namespaces/{namespace}/pods"\n'
        'POD = "/api/v1/namespaces/{namespace}/pods/{name}"\n'
        "rest.watch(path(PODS, namespace='n'), timeout_s=5)\n"
        "rest.patch(path(PODS, namespace='n') + '/x/status', {})\n"
        "rest.delete(path(POD, namespace='n', name='x'))\n"
        "cache.get(key)\n"
    )
    calls = find_rest_calls({"new.py": snippet})
    assert [(c.method, c.template, c.watched) for c in calls] == [
        ("GET", "/api/v1/namespaces/{namespace}/pods", True),
        ("PATCH", "/api/v1/namespaces/{namespace}/pods/x/status", False),
        ("DELETE", "/api/v1/namespaces/{namespace}/pods/{name}", False),
    ]
    assert permissions_of_request("GET", calls[0].template, watched=True) == {Permission("", "pods", "watch")}
    assert permissions_of_request("PATCH", calls[1].template, watched=False) == {
        Permission("", "pods/status", "patch")
    }
    assert permissions_of_request("DELETE", calls[2].template, watched=False) == {
        Permission("", "pods", "delete")
    }
    for hidden in ("self._rest.get(built_at_run_time)\n", 'rest.delete(f"{PODS}/{name}")\n'):
        with pytest.raises(AssertionError, match="name the path"):
            find_rest_calls({"hidden.py": hidden})


def test_no_raw_requests_hide_from_the_scan() -> None:
    for name, text in plugin_sources().items():
        for word in OPAQUE:
            assert word not in text, f"{name} uses {word}: add its permissions to this test by hand"


def test_a_new_call_without_a_rule_would_fail() -> None:
    snippet = "from kubernetes import client as k8s\nk8s.CoreV1Api(api).delete_namespaced_pod(name='x')\n"
    [call] = find_calls({"new.py": snippet})
    [p] = permissions_of(call)
    assert p == Permission("", "pods", "delete")
    assert p not in granted()


def test_paths_map_to_the_verbs_rbac_checks() -> None:
    def perms(api: str, method: str, watched: bool = False) -> set[Permission]:
        return permissions_of(Call(api, method, watched, "t"))

    assert perms("ResourceV1Api", "replace_resource_slice") == {
        Permission("resource.k8s.io", "resourceslices", "update")
    }
    assert perms("ResourceV1Api", "read_namespaced_resource_claim") == {
        Permission("resource.k8s.io", "resourceclaims", "get")
    }
    assert perms("ResourceV1Api", "replace_namespaced_resource_claim_status") == {
        Permission("resource.k8s.io", "resourceclaims/status", "update"),
        Permission("resource.k8s.io", "resourceclaims/driver", "associated-node:update", DRIVER_NAME),
    }
    assert perms("CoreV1Api", "list_node", watched=True) == {Permission("", "nodes", "watch")}
    assert perms("CoreV1Api", "delete_collection_namespaced_pod") == {
        Permission("", "pods", "deletecollection")
    }
