"""The stand-in's record of a started pod (`<runtime dir>/<namespace>_<name>_<uid>.json`): which claims were
prepared with which devices, and every container as the runtime created it. Tests and the demo read it the
way one would inspect a real container's environment and mounts."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.io.files import atomic_write
from e2e.kubelet_standin.container_edits import ContainerConfig, DeviceNodeEdit, HookEdit, MountEdit
from e2e.kubelet_standin.errors import StandInError
from e2e.kubelet_standin.pod_claims import PreparedDevice

API_VERSION = "standin.e2e.tessera.dev/v1"
KIND = "PodRuntime"


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    name: str
    uid: str
    devices: tuple[PreparedDevice, ...]


@dataclass(frozen=True, slots=True)
class PodRuntime:
    node: str
    namespace: str
    name: str
    uid: str
    claims: tuple[PreparedClaim, ...]
    containers: Mapping[str, ContainerConfig]

    def container(self, name: str) -> ContainerConfig:
        return self.containers[name]


def record_file_name(namespace: str, name: str, uid: str) -> str:
    return f"{namespace}_{name}_{uid}.json"


def _device_to_dict(d: PreparedDevice) -> dict[str, Any]:
    return {
        "requestNames": list(d.request_names),
        "pool": d.pool,
        "device": d.device,
        "cdiDeviceIds": list(d.cdi_device_ids),
        "shareId": d.share_id,
    }


def _container_to_dict(c: ContainerConfig) -> dict[str, Any]:
    return {
        "cdiDevices": list(c.cdi_devices),
        "env": [[k, v] for k, v in c.env],
        "mounts": [
            {
                "hostPath": m.host_path,
                "containerPath": m.container_path,
                "type": m.type,
                "options": list(m.options),
            }
            for m in c.mounts
        ],
        "deviceNodes": [
            {
                "path": n.path,
                "hostPath": n.host_path,
                "type": n.type,
                "major": n.major,
                "minor": n.minor,
                "permissions": n.permissions,
                "fileMode": n.file_mode,
                "uid": n.uid,
                "gid": n.gid,
            }
            for n in c.device_nodes
        ],
        "hooks": [
            {
                "hookName": h.hook_name,
                "path": h.path,
                "args": list(h.args),
                "env": list(h.env),
                "timeout": h.timeout,
            }
            for h in c.hooks
        ],
        "error": c.error,
    }


def encode(record: PodRuntime) -> dict[str, Any]:
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "node": record.node,
        "namespace": record.namespace,
        "name": record.name,
        "uid": record.uid,
        "claims": [
            {"name": c.name, "uid": c.uid, "devices": [_device_to_dict(d) for d in c.devices]}
            for c in record.claims
        ],
        "containers": {name: _container_to_dict(c) for name, c in record.containers.items()},
    }


def _container_from_dict(d: Mapping[str, Any]) -> ContainerConfig:
    return ContainerConfig(
        cdi_devices=tuple(d["cdiDevices"]),
        env=tuple((str(k), str(v)) for k, v in d["env"]),
        mounts=tuple(
            MountEdit(
                host_path=m["hostPath"],
                container_path=m["containerPath"],
                type=m["type"],
                options=tuple(m["options"]),
            )
            for m in d["mounts"]
        ),
        device_nodes=tuple(
            DeviceNodeEdit(
                path=n["path"],
                host_path=n["hostPath"],
                type=n["type"],
                major=n["major"],
                minor=n["minor"],
                permissions=n["permissions"],
                file_mode=n["fileMode"],
                uid=n["uid"],
                gid=n["gid"],
            )
            for n in d["deviceNodes"]
        ),
        hooks=tuple(
            HookEdit(
                hook_name=h["hookName"],
                path=h["path"],
                args=tuple(h["args"]),
                env=tuple(h["env"]),
                timeout=h["timeout"],
            )
            for h in d["hooks"]
        ),
        error=d["error"],
    )


def decode(raw: object, *, where: str = "pod runtime record") -> PodRuntime:
    if not isinstance(raw, Mapping):
        raise StandInError(f"{where}: not an object")
    if raw.get("apiVersion") != API_VERSION or raw.get("kind") != KIND:
        raise StandInError(
            f"{where}: apiVersion/kind {raw.get('apiVersion')}/{raw.get('kind')} is not {API_VERSION}/{KIND}"
        )
    try:
        return PodRuntime(
            node=raw["node"],
            namespace=raw["namespace"],
            name=raw["name"],
            uid=raw["uid"],
            claims=tuple(
                PreparedClaim(
                    name=c["name"],
                    uid=c["uid"],
                    devices=tuple(
                        PreparedDevice(
                            request_names=tuple(d["requestNames"]),
                            pool=d["pool"],
                            device=d["device"],
                            cdi_device_ids=tuple(d["cdiDeviceIds"]),
                            share_id=d["shareId"],
                        )
                        for d in c["devices"]
                    ),
                )
                for c in raw["claims"]
            ),
            containers={name: _container_from_dict(c) for name, c in raw["containers"].items()},
        )
    except (KeyError, TypeError, ValueError) as e:
        raise StandInError(f"{where}: malformed ({e!r})") from e


def write_record(directory: Path, record: PodRuntime) -> Path:
    """Durably (temp, fsync, rename, fsync of the directory), so a reader sees a whole record or none."""
    path = directory / record_file_name(record.namespace, record.name, record.uid)
    atomic_write(path, json.dumps(encode(record), indent=1).encode())
    return path


def read_record(path: Path) -> PodRuntime:
    try:
        raw = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise StandInError(f"cannot read {path}: {e}") from e
    return decode(raw, where=str(path))


def find_record(directory: Path, *, namespace: str, name: str) -> PodRuntime | None:
    matches = sorted(directory.glob(f"{namespace}_{name}_*.json"))
    return read_record(matches[-1]) if matches else None
