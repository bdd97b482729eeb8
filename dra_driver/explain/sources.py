"""Where explain's inputs come from: YAML files, or the API server. The I/O edge of `tessera explain`."""

from __future__ import annotations

from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dra_driver.io.yaml_files import read_yaml
from dra_driver.vocabulary.errors import ConfigError, TesseraError

Obj = Mapping[str, Any]
# The DeviceClasses shipped in this repository, used with --simulate when no class is given.
REPO_DEVICECLASSES = Path(__file__).resolve().parents[2] / "deviceclasses"


@dataclass(frozen=True, slots=True)
class Inputs:
    slices: tuple[Obj, ...] = ()
    claims: tuple[Obj, ...] = ()  # ResourceClaims (allocated ones occupy devices)
    templates: tuple[Obj, ...] = ()
    classes: tuple[Obj, ...] = ()
    nodes: tuple[Obj, ...] = field(default=())  # SimulatedNode documents

    def __add__(self, other: Inputs) -> Inputs:
        return Inputs(
            self.slices + other.slices,
            self.claims + other.claims,
            self.templates + other.templates,
            self.classes + other.classes,
            self.nodes + other.nodes,
        )


def _documents(path: Path) -> Iterator[Obj]:
    for doc in read_yaml(path):  # bounded: size, nesting, aliases
        if doc is None:
            continue
        if not isinstance(doc, Mapping):
            raise ConfigError(f"{path}: every document must be an object with a kind")
        if doc.get("kind", "").endswith("List"):
            yield from doc.get("items") or ()
        else:
            yield doc


def sort_objects(objects: Iterable[Obj], *, origin: str) -> Inputs:
    buckets: dict[str, list[Obj]] = {k: [] for k in ("slices", "claims", "templates", "classes", "nodes")}
    where = {
        "ResourceSlice": "slices",
        "ResourceClaim": "claims",
        "ResourceClaimTemplate": "templates",
        "DeviceClass": "classes",
        "SimulatedNode": "nodes",
    }
    for obj in objects:
        kind = str(obj.get("kind", ""))
        if kind in where:
            buckets[where[kind]].append(obj)
        elif kind not in ("ValidatingAdmissionPolicy", "ValidatingAdmissionPolicyBinding"):
            raise ConfigError(
                f"{origin}: kind {kind!r} is not one explain reads "
                "(ResourceSlice, ResourceClaim, ResourceClaimTemplate, DeviceClass, SimulatedNode)"
            )
    return Inputs(*(tuple(buckets[k]) for k in ("slices", "claims", "templates", "classes", "nodes")))


def load_files(paths: Iterable[Path]) -> Inputs:
    total = Inputs()
    for path in paths:
        files = sorted(path.glob("*.yaml")) if path.is_dir() else [path]
        for f in files:
            total = total + sort_objects(_documents(f), origin=str(f))
    return total


def simulated_slices(node_doc: Obj, *, settings: Path | None = None) -> tuple[Obj, ...]:
    """Slices a simulated node would publish with `settings` (a NodeSettings file; None: the defaults), from
    the node plugin's own pure slice builder."""
    try:
        from dra_driver.explain.simulation import slices_for_simulated_node  # noqa: PLC0415 - optional wiring
    except ImportError as e:
        raise ConfigError(
            "this build cannot turn a SimulatedNode into slices; pass ResourceSlices instead"
        ) from e
    return tuple(slices_for_simulated_node(node_doc, settings=settings))


class ClusterSource:
    """Reads slices, claims and classes through the Kubernetes API (kubeconfig or in-cluster)."""

    def __init__(self, *, kubeconfig: str | None) -> None:
        try:
            from kubernetes import client, config  # noqa: PLC0415 - only the cluster mode needs it

            if kubeconfig:
                config.load_kube_config(config_file=kubeconfig)  # type: ignore[no-untyped-call]
            else:
                try:
                    config.load_incluster_config()  # type: ignore[no-untyped-call]
                except config.ConfigException:
                    config.load_kube_config()  # type: ignore[no-untyped-call]
            self._api_client = client.ApiClient()
            self._api = client.ResourceV1Api(self._api_client)
        except Exception as e:
            raise ConfigError(f"cannot reach the cluster: {e}; pass --kubeconfig") from e

    def _plain(self, obj: Any) -> Obj:
        data: Obj = self._api_client.sanitize_for_serialization(obj)  # type: ignore[no-untyped-call]
        return data

    def _items(self, result: Any, kind: str) -> tuple[Obj, ...]:
        return tuple({**self._plain(i), "kind": kind} for i in result.items)

    def claim(self, namespace: str, name: str) -> Obj:
        try:
            return {
                **self._plain(self._api.read_namespaced_resource_claim(name, namespace)),
                "kind": "ResourceClaim",
            }
        except Exception as e:
            raise TesseraError(f"cannot read ResourceClaim {namespace}/{name}: {e}") from e

    def inputs(self, *, node: str) -> Inputs:
        try:
            slices = self._items(self._api.list_resource_slice(), "ResourceSlice")
            claims = self._items(self._api.list_resource_claim_for_all_namespaces(), "ResourceClaim")
            classes = self._items(self._api.list_device_class(), "DeviceClass")
        except Exception as e:
            raise TesseraError(f"cannot list DRA objects: {e}") from e
        mine = tuple(s for s in slices if (s.get("spec") or {}).get("nodeName") in (node, None))
        return Inputs(slices=mine, claims=claims, classes=classes)
