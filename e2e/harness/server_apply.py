"""Manifests applied from the test's own process, as `kubectl apply --server-side --force-conflicts` applies
them: one PATCH of each object (`application/apply-patch+yaml`, the API server merges) through the
harness's API client.

Why not kubectl: a `kubectl apply` process costs 0.3-0.5 CPU-s on this machine, several seconds on a
control plane it has not met (discovery and the OpenAPI schema, cached per server address), and the suite
applies a few hundred times. The objects, their admission and the API server's errors are the same; the
scenarios that show what a user types (`kubectl describe`, the chart's notes, the demo, the benchmarks'
timings) still run kubectl.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import Any

from kubernetes.client import ApiClient
from kubernetes.client.exceptions import ApiException

from dra_driver.io.api_objects import Json, path
from dra_driver.io.rest_calls import RestCalls, status_message
from e2e.kubelet_standin.errors import StandInError

APPLY_PATCH = "application/apply-patch+yaml"  # JSON is YAML: the client sends the dict as JSON
FIELD_MANAGER = "tessera-e2e"


@dataclass(frozen=True, slots=True)
class Resource:
    """Where the API server keeps one kind: `plural` under `base`, in a namespace or not."""

    base: str  # /api/v1 or /apis/<group>/<version>
    plural: str
    namespaced: bool

    def at(self, name: str, namespace: str) -> str:
        where = path("/namespaces/{ns}", ns=namespace) if self.namespaced else ""
        return f"{self.base}{where}/{self.plural}" + path("/{name}", name=name)


class ServerApply:
    """Applies manifests; kinds are found by discovery, once per group version (again for a kind not yet
    served, e.g. a CRD just established)."""

    def __init__(self, api: ApiClient) -> None:
        self._rest = RestCalls(api)
        self._kinds: dict[tuple[str, str], Resource] = {}  # a dict's get and update are atomic: no lock

    def apply(self, documents: Iterable[Mapping[str, Any]], *, namespace: str | None = None) -> list[Json]:
        """Each object as stored, in order; StandInError naming the object and the API server's message at
        the first one refused (those before it stay applied, as with kubectl)."""
        return [self._one(doc, namespace) for doc in documents if doc]

    def _one(self, doc: Mapping[str, Any], namespace: str | None) -> Json:
        api_version, kind = str(doc.get("apiVersion") or ""), str(doc.get("kind") or "")
        metadata = doc.get("metadata") or {}
        name = str(metadata.get("name") or "")
        if not (api_version and kind and name):
            raise StandInError(f"apply: a manifest needs apiVersion, kind and metadata.name: {dict(doc)}")
        resource = self._resource(api_version, kind)
        ns = str(metadata.get("namespace") or namespace or "default")
        body: Json = dict(doc)
        if resource.namespaced:
            body["metadata"] = {**metadata, "namespace": ns}
        what = f"{kind} {ns + '/' if resource.namespaced else ''}{name}"
        try:
            return self._rest.patch(
                resource.at(name, ns),
                body,
                content_type=APPLY_PATCH,
                fieldManager=FIELD_MANAGER,
                force="true",
                fieldValidation="Strict",  # kubectl's default: an unknown field is an error, not dropped
            )
        except ApiException as e:
            raise StandInError(f"apply {what} failed ({e.status}): {status_message(e)}") from e

    def _resource(self, api_version: str, kind: str) -> Resource:
        found = self._kinds.get((api_version, kind))
        if found is None:
            self._discover(api_version)
            found = self._kinds.get((api_version, kind))
        if found is None:
            raise StandInError(f"apply: the API server serves no kind {kind} in {api_version}")
        return found

    def _discover(self, api_version: str) -> None:
        base = f"/api/{api_version}" if "/" not in api_version else f"/apis/{api_version}"
        try:
            listing = self._rest.get(base)
        except ApiException as e:
            if e.status == 404:
                return  # the group version is not served (yet): the caller names the kind
            raise StandInError(
                f"apply: discovery of {api_version} failed ({e.status}): {status_message(e)}"
            ) from e
        found = {
            (api_version, str(r["kind"])): Resource(base, str(r["name"]), bool(r.get("namespaced")))
            for r in listing.get("resources") or []
            if isinstance(r, dict) and "/" not in str(r.get("name")) and r.get("kind")
        }
        self._kinds.update(found)
