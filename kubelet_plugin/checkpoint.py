"""The prepare/unprepare checkpoint as plain values, with a checksummed, versioned JSON form (pure).

An entry is written `PrepareStarted` (with the MIG placements it intends to create) before anything is
created, so after a crash every Tessera MIG instance can be told from an administrator's by its placement.

Decoding trusts nothing: every field is type-checked and a file that is not exactly what `encode` writes
raises StorageError naming what is wrong (bounded, see `dra_driver.excerpt`). Another apiVersion of ours
raises UnsupportedVersionError: a newer Tessera wrote it, and this one must not act on what it cannot read.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar

from dra_driver.errors import InvalidNameError, StorageError, UnsupportedVersionError
from dra_driver.excerpt import clip, excerpt
from dra_driver.names import ClaimUID, GpuUUID

API_GROUP = "checkpoint.tessera.dev"
API_VERSION = f"{API_GROUP}/v1"
KIND = "Checkpoint"

T = TypeVar("T")


class _MalformedError(ValueError):
    """A field of the right name with the wrong type or value; the message names it."""


def _field(d: Mapping[str, Any], key: str, kind: type[T], *, optional: bool = False) -> T:
    if not isinstance(d, Mapping):
        raise _MalformedError(f"expected an object, got {excerpt(d)}")
    if key not in d or d[key] is None:
        if optional:
            return None  # type: ignore[return-value]
        raise _MalformedError(f"field {key!r} is missing")
    value = d[key]
    # bool is an int in Python, never in JSON
    if not isinstance(value, kind) or (kind is int and isinstance(value, bool)):
        raise _MalformedError(f"field {key!r} must be a {kind.__name__}, got {excerpt(value)}")
    return value


def _strings(d: Mapping[str, Any], key: str) -> tuple[str, ...]:
    values = _field(d, key, list)
    if not all(isinstance(v, str) for v in values):
        raise _MalformedError(f"field {key!r} must be a list of strings, got {excerpt(values)}")
    return tuple(values)


def _objects(d: Mapping[str, Any], key: str) -> list[Mapping[str, Any]]:
    values = _field(d, key, list)
    if not all(isinstance(v, Mapping) for v in values):
        raise _MalformedError(f"field {key!r} must be a list of objects, got {excerpt(values)}")
    return values


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
            device=_field(d, "device", str),
            gpu_uuid=GpuUUID(_field(d, "gpuUUID", str)),
            profile_id=_field(d, "profileID", int),
            profile_name=_field(d, "profileName", str),
            start=_field(d, "start", int),
            created_by_tessera=_field(d, "createdByTessera", bool),
            gi_id=_field(d, "giID", int, optional=True),
            ci_id=_field(d, "ciID", int, optional=True),
            uuid=_field(d, "uuid", str, optional=True),
        )


@dataclass(frozen=True, slots=True)
class GpuShare:
    """A vgpu claim's place on a shared GPU: its slot in the GPU's time-division schedule (gpu_sharing.py)."""

    gpu_uuid: GpuUUID
    slot: int
    cores: int  # the share its part of the frame is sized by; 0 = none reserved
    high_priority: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {
            "gpuUUID": self.gpu_uuid,
            "slot": self.slot,
            "cores": self.cores,
            "highPriority": self.high_priority,
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> GpuShare:
        slot, cores = _field(d, "slot", int), _field(d, "cores", int)
        if not 1 <= slot <= 65535 or not 0 <= cores <= 100:
            raise _MalformedError(f"share slot {slot} (1-65535) or cores {cores} (0-100) out of range")
        return cls(
            gpu_uuid=GpuUUID(_field(d, "gpuUUID", str)),
            slot=slot,
            cores=cores,
            high_priority=_field(d, "highPriority", bool),
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
            request_names=_strings(d, "requestNames"),
            pool_name=_field(d, "poolName", str),
            device_name=_field(d, "deviceName", str),
            cdi_device_ids=_strings(d, "cdiDeviceIDs"),
            share_id=_field(d, "shareID", str, optional=True),
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
    sharing: tuple[GpuShare, ...] = ()  # vgpu devices: their slots on shared GPUs

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
            "sharing": [s.to_dict() for s in self.sharing],
        }

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClaimEntry:
        """Raises ValueError (or InvalidNameError for a UID that could name a path) on anything unexpected."""
        state = _field(d, "state", str)
        if state not in {s.value for s in ClaimState}:
            raise _MalformedError(
                f"field 'state' must be one of {[s.value for s in ClaimState]}, got {excerpt(state)}"
            )
        return cls(
            uid=ClaimUID(_field(d, "uid", str)),
            namespace=_field(d, "namespace", str),
            name=_field(d, "name", str),
            state=ClaimState(state),
            devices=tuple(DeviceRecord.from_dict(x) for x in _objects(d, "devices")),
            mig=tuple(MigRecord.from_dict(x) for x in _objects(d, "mig")),
            has_claim_dir=bool(_field(d, "claimDir", bool, optional=True)),
            sharing=tuple(GpuShare.from_dict(x) for x in (_objects(d, "sharing") if "sharing" in d else [])),
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

    def shares(self) -> Iterable[GpuShare]:
        """Every vgpu claim's place on a shared GPU."""
        for entry in self.claims.values():
            yield from entry.sharing

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
    """Parse and verify; anything unexpected is a StorageError naming what is wrong.

    UnsupportedVersionError (a StorageError) for a checkpoint of another apiVersion of ours.
    """
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise StorageError(f"{source}: not valid JSON ({clip(str(e), 200)}); the file is corrupt") from e
    if not isinstance(doc, dict):
        raise StorageError(f"{source}: not a JSON object; the file is corrupt")
    api_version, kind = doc.get("apiVersion"), doc.get("kind")
    if (
        isinstance(api_version, str)
        and api_version.startswith(f"{API_GROUP}/")
        and api_version != API_VERSION
    ):
        raise UnsupportedVersionError(
            f"{source} has apiVersion {excerpt(api_version)}: it was written by another (newer) version of "
            f"Tessera; this one reads {API_VERSION} only and leaves the node as it is. Run the version that "
            "wrote it, or move the file away to make this version rebuild its state from the node"
        )
    if api_version != API_VERSION or kind != KIND:
        raise StorageError(
            f"{source}: apiVersion/kind {excerpt(api_version)}/{excerpt(kind)}, "
            f"expected {API_VERSION}/{KIND}; the file is corrupt"
        )
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "checksum")}
    try:
        intact = doc.get("checksum") == _digest(_canonical(body))
    except RecursionError:
        intact = False
    if not intact:
        raise StorageError(f"{source}: checksum mismatch; the file is corrupt or was edited by hand")
    try:
        entries = [ClaimEntry.from_dict(e) for e in _objects(body, "claims")]
        owned = _strings(body, "migModeOwned")
        boot_id = _field(body, "bootID", str)
    except (ValueError, InvalidNameError) as e:
        raise StorageError(f"{source}: malformed content ({e}); the file is corrupt") from e
    claims = {e.uid: e for e in entries}
    if len(claims) != len(entries):
        raise StorageError(f"{source}: a claim is listed twice; the file is corrupt")
    return Checkpoint(boot_id=boot_id, claims=claims, mig_mode_owned=frozenset(GpuUUID(g) for g in owned))
