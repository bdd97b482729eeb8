"""The demo's state file (`<state dir>/demo.json`): the nodes' processes, so `down` can stop them from any
shell. The control plane keeps its own state file in `<state dir>/controlplane`."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane.files import write_atomic
from e2e.harness.node import NodeRecord
from e2e.kubelet_standin.errors import StandInError

API_VERSION = "tessera.dev/e2e/v1"
KIND = "DemoState"
FILE_NAME = "demo.json"


@dataclass(frozen=True, slots=True)
class DemoState:
    kubeconfig: str
    kubectl: str
    namespace: str
    nodes: tuple[NodeRecord, ...]


def encode(state: DemoState) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "kubeconfig": state.kubeconfig,
        "kubectl": state.kubectl,
        "namespace": state.namespace,
        "nodes": [n.to_dict() for n in state.nodes],
    }


def decode(raw: object, *, where: str) -> DemoState:
    if not isinstance(raw, dict) or raw.get("apiVersion") != API_VERSION or raw.get("kind") != KIND:
        raise StandInError(
            f"{where} is not a {API_VERSION} {KIND}; delete it if it is left over from another version"
        )
    try:
        return DemoState(
            kubeconfig=raw["kubeconfig"],
            kubectl=raw["kubectl"],
            namespace=raw["namespace"],
            nodes=tuple(NodeRecord.from_dict(n) for n in raw["nodes"]),
        )
    except (KeyError, TypeError) as e:
        raise StandInError(f"{where}: malformed ({e!r}); delete it and run `make demo` again") from e


def save(state_dir: Path, state: DemoState) -> None:
    write_atomic(state_dir / FILE_NAME, json.dumps(encode(state), indent=2).encode() + b"\n", mode=0o644)


def load(state_dir: Path) -> DemoState | None:
    path = state_dir / FILE_NAME
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    try:
        return decode(json.loads(text), where=str(path))
    except ValueError as e:
        raise StandInError(f"{path} is not JSON ({e}); delete it") from e


def forget(state_dir: Path) -> None:
    (state_dir / FILE_NAME).unlink(missing_ok=True)
