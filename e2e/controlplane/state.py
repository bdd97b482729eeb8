"""The state file of a running control plane: what runs where, so `down` (or a later run) can stop it
even after the process that started it is gone."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.files import write_atomic

API_VERSION = "tessera.dev/e2e/v1"
KIND = "ControlPlaneState"
STATE_FILE = "state.json"


@dataclass(frozen=True, slots=True)
class ComponentRecord:
    name: str
    pid: int
    binary: str
    log: str


@dataclass(frozen=True, slots=True)
class ControlPlaneState:
    server: str
    kubeconfig: str
    etcd: str
    components: tuple[ComponentRecord, ...]


def state_path(state_dir: Path) -> Path:
    return state_dir / STATE_FILE


def dump_state(state: ControlPlaneState) -> bytes:
    document = {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "server": state.server,
        "kubeconfig": state.kubeconfig,
        "etcd": state.etcd,
        "components": [
            {"name": c.name, "pid": c.pid, "binary": c.binary, "log": c.log} for c in state.components
        ],
    }
    return json.dumps(document, indent=2).encode("utf-8") + b"\n"


def _field(document: dict[str, Any], key: str, kind: type, where: str) -> Any:
    value = document.get(key)
    if not isinstance(value, kind):
        raise ControlPlaneError(
            f"{where}: field {key!r} must be a {kind.__name__}, got {value!r}; "
            "delete the state directory if it is left over from another version"
        )
    return value


def parse_state(data: bytes, *, source: str) -> ControlPlaneState:
    try:
        document = json.loads(data)
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise ControlPlaneError(
            f"{source}: not JSON ({e}); delete the file and stop the processes by hand"
        ) from e
    if not isinstance(document, dict):
        raise ControlPlaneError(f"{source}: expected a JSON object")
    if document.get("apiVersion") != API_VERSION or document.get("kind") != KIND:
        raise ControlPlaneError(
            f"{source}: apiVersion/kind must be {API_VERSION}/{KIND}, got "
            f"{document.get('apiVersion')!r}/{document.get('kind')!r}"
        )
    records = []
    for index, item in enumerate(_field(document, "components", list, source)):
        where = f"{source}: components[{index}]"
        if not isinstance(item, dict):
            raise ControlPlaneError(f"{where}: expected an object")
        records.append(
            ComponentRecord(
                name=_field(item, "name", str, where),
                pid=_field(item, "pid", int, where),
                binary=_field(item, "binary", str, where),
                log=_field(item, "log", str, where),
            )
        )
    return ControlPlaneState(
        server=_field(document, "server", str, source),
        kubeconfig=_field(document, "kubeconfig", str, source),
        etcd=_field(document, "etcd", str, source),
        components=tuple(records),
    )


def save_state(state_dir: Path, state: ControlPlaneState) -> None:
    write_atomic(state_path(state_dir), dump_state(state), mode=0o644)


def load_state(state_dir: Path) -> ControlPlaneState | None:
    path = state_path(state_dir)
    try:
        data = path.read_bytes()
    except FileNotFoundError:
        return None
    return parse_state(data, source=str(path))
