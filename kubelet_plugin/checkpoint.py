"""The prepare/unprepare checkpoint as plain values, with a checksummed, versioned JSON form (pure).

An entry is written `PrepareStarted` (with the MIG placements it intends to create) before anything is
created, so after a crash every Tessera MIG instance can be told from an administrator's by its placement.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any

from dra_driver.errors import StorageError
from dra_driver.names import ClaimUID, GpuUUID

API_VERSION = "checkpoint.tessera.dev/v1"
KIND = "Checkpoint"


class ClaimState(StrEnum):
    PREPARE_STARTED = "PrepareStarted"
    PREPARE_COMPLETED = "PrepareCompleted"
    UNPREPARE_STARTED = "UnprepareStarted"


@dataclass(frozen=True, slots=True)
class MigRecord:
    """A MIG instance a claim uses: intended (ids unset) until created, or an admin's static one."""

    device: str
    gpu_uuid: GpuUUID
    profile_id: int
    profile_name: str
    start: int
    created_by_tessera: bool = True
    gi_id: int | None = None
    ci_id: int | None = None
    uuid: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "device": self.device,
            "gpuUUID": self.gpu_uuid,
            "profileID": self.profile_id,
            "profileName": self.profile_name,
            "start": self.start,
            "createdByTessera": self.created_by_tessera,
            "giID": self.gi_id,
            "ciID": self.ci_id,
            "uuid": self.uuid,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> MigRecord:
        return cls(
            device=d["device"],
            gpu_uuid=GpuUUID(d["gpuUUID"]),
            profile_id=int(d["profileID"]),
            profile_name=d["profileName"],
            start=int(d["start"]),
            created_by_tessera=bool(d["createdByTessera"]),
            gi_id=d.get("giID"),
            ci_id=d.get("ciID"),
            uuid=d.get("uuid"),
        )


@dataclass(frozen=True, slots=True)
class DeviceRecord:
    """One device of the answer given to the kubelet, replayed on an idempotent prepare."""

    request_names: tuple[str, ...]
    pool_name: str
    device_name: str
    cdi_device_ids: tuple[str, ...]
    share_id: str | None = None

    def to_dict(self) -> dict[str, Any]:
        return {
            "requestNames": list(self.request_names),
            "poolName": self.pool_name,
            "deviceName": self.device_name,
            "cdiDeviceIDs": list(self.cdi_device_ids),
            "shareID": self.share_id,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> DeviceRecord:
        return cls(
            request_names=tuple(d["requestNames"]),
            pool_name=d["poolName"],
            device_name=d["deviceName"],
            cdi_device_ids=tuple(d["cdiDeviceIDs"]),
            share_id=d.get("shareID"),
        )


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    uid: ClaimUID
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[DeviceRecord, ...] = ()
    mig: tuple[MigRecord, ...] = ()
    has_claim_dir: bool = False

    def with_state(self, state: ClaimState) -> ClaimEntry:
        return replace(self, state=state)

    def to_dict(self) -> dict[str, Any]:
        return {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state.value,
            "devices": [d.to_dict() for d in self.devices],
            "mig": [m.to_dict() for m in self.mig],
            "claimDir": self.has_claim_dir,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClaimEntry:
        return cls(
            uid=ClaimUID(d["uid"]),
            namespace=d["namespace"],
            name=d["name"],
            state=ClaimState(d["state"]),
            devices=tuple(DeviceRecord.from_dict(x) for x in d["devices"]),
            mig=tuple(MigRecord.from_dict(x) for x in d["mig"]),
            has_claim_dir=bool(d.get("claimDir", False)),
        )


@dataclass(frozen=True, slots=True)
class Checkpoint:
    boot_id: str
    claims: Mapping[ClaimUID, ClaimEntry] = field(default_factory=dict)
    # GPUs whose MIG mode Tessera switched on; it switches them off again after its last instance.
    mig_mode_owned: frozenset[GpuUUID] = frozenset()

    def entry(self, uid: ClaimUID) -> ClaimEntry | None:
        return self.claims.get(uid)

    def with_entries(self, entries: Iterable[ClaimEntry]) -> Checkpoint:
        claims = dict(self.claims)
        claims.update((e.uid, e) for e in entries)
        return replace(self, claims=claims)

    def without(self, uids: Iterable[ClaimUID]) -> Checkpoint:
        drop = set(uids)
        return replace(self, claims={u: e for u, e in self.claims.items() if u not in drop})

    def with_mig_mode_owned(self, gpus: frozenset[GpuUUID]) -> Checkpoint:
        return replace(self, mig_mode_owned=gpus)

    def tessera_mig(self) -> Iterable[tuple[ClaimEntry, MigRecord]]:
        """Every MIG record Tessera created or intends to create, across all claims."""
        for entry in self.claims.values():
            for record in entry.mig:
                if record.created_by_tessera:
                    yield entry, record


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=8192)
def _entry_json(entry: ClaimEntry) -> str:
    # Entries are immutable: a save re-serialises only the claims that changed.
    return _canonical(entry.to_dict())


def _body_json(cp: Checkpoint) -> str:
    """The canonical body (sorted keys, no spaces), built from cached entry fragments."""
    claims = ",".join(_entry_json(cp.claims[uid]) for uid in sorted(cp.claims))
    boot = json.dumps(cp.boot_id)
    owned = json.dumps(sorted(cp.mig_mode_owned), separators=(",", ":"))
    return f'{{"bootID":{boot},"claims":[{claims}],"migModeOwned":{owned}}}'


def _digest(canonical: str) -> str:
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def encode(cp: Checkpoint) -> bytes:
    body = _body_json(cp)
    head = json.dumps(
        {"apiVersion": API_VERSION, "kind": KIND, "checksum": _digest(body)}, separators=(",", ":")
    )
    return (head[:-1] + "," + body[1:]).encode()


def decode(data: bytes, *, source: str = "checkpoint") -> Checkpoint:
    """Parse and verify; anything unexpected is a StorageError naming what is wrong."""
    try:
        doc = json.loads(data)
    except ValueError as e:
        raise StorageError(f"{source}: not valid JSON ({e}); the file is corrupt") from e
    if not isinstance(doc, dict):
        raise StorageError(f"{source}: not a JSON object; the file is corrupt")
    if doc.get("apiVersion") != API_VERSION or doc.get("kind") != KIND:
        raise StorageError(
            f"{source}: apiVersion/kind {doc.get('apiVersion')!r}/{doc.get('kind')!r}, "
            f"expected {API_VERSION}/{KIND}"
        )
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "checksum")}
    if doc.get("checksum") != _digest(_canonical(body)):
        raise StorageError(f"{source}: checksum mismatch; the file is corrupt or was edited by hand")
    try:
        entries = [ClaimEntry.from_dict(e) for e in body["claims"]]
        return Checkpoint(
            boot_id=str(body["bootID"]),
            claims={e.uid: e for e in entries},
            mig_mode_owned=frozenset(GpuUUID(g) for g in body["migModeOwned"]),
        )
    except (KeyError, TypeError, ValueError) as e:
        raise StorageError(f"{source}: malformed content ({e!r})") from e
