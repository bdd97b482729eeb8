"""The prepare/unprepare checkpoint as plain values, with a checksummed, versioned JSON form (pure).

An entry is written `PrepareStarted` (with what each family intends: the MIG placements it will create, ...)
before anything is created, so after a crash every Tessera MIG instance can be told from an administrator's by
its placement. Each family encodes its own records (dra_driver/core/families) under its own key.

Decoding trusts nothing: every field is type-checked and a file that is not exactly what `encode` writes
raises CheckpointError (a StorageError) naming what is wrong (bounded, see `dra_driver.vocabulary.excerpt`).
Another apiVersion of ours raises UnsupportedVersionError: a newer Tessera wrote it, and this one must not act
on what it cannot read.
"""

from __future__ import annotations

import functools
import hashlib
import json
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field, replace
from enum import StrEnum
from typing import Any, TypeVar, cast

from dra_driver.core import families
from dra_driver.core.families.protocol import Recording
from dra_driver.vocabulary.errors import CheckpointError, InvalidNameError, UnsupportedVersionError
from dra_driver.vocabulary.excerpt import clip, excerpt
from dra_driver.vocabulary.inventory import Placement
from dra_driver.vocabulary.names import ClaimUID, Family, GpuUUID
from kubelet_plugin.record.results import PreparedDevice

API_GROUP = "checkpoint.tessera.dev"
API_VERSION = f"{API_GROUP}/v1"
KIND = "Checkpoint"

T = TypeVar("T")
R = TypeVar("R")


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


def _device_to_dict(d: PreparedDevice) -> dict[str, Any]:
    return {
        "requestNames": list(d.request_names),
        "poolName": d.pool_name,
        "deviceName": d.device_name,
        "cdiDeviceIDs": list(d.cdi_device_ids),
        "shareID": d.share_id,
    }


def _device_from_dict(d: Mapping[str, Any]) -> PreparedDevice:
    return PreparedDevice(
        request_names=_strings(d, "requestNames"),
        pool_name=_field(d, "poolName", str),
        device_name=_field(d, "deviceName", str),
        cdi_device_ids=_strings(d, "cdiDeviceIDs"),
        share_id=_field(d, "shareID", str, optional=True),
    )


Records = tuple[tuple[Family, tuple[object, ...]], ...]  # per family, sorted by name; hashable


def records_of(by_family: Mapping[Family, Iterable[object]]) -> Records:
    return tuple(sorted((f, tuple(r)) for f, r in by_family.items() if r))


@dataclass(frozen=True, slots=True)
class ClaimEntry:
    uid: ClaimUID
    namespace: str
    name: str
    state: ClaimState
    devices: tuple[PreparedDevice, ...] = ()  # the answer given to the kubelet, replayed on a repeat
    records: Records = ()  # what each family holds for the claim (MIG placements, slots, ...)
    has_claim_dir: bool = False  # a device uses the interception library: the claim has a directory

    def of(self, family: Family) -> tuple[object, ...]:
        return next((r for f, r in self.records if f == family), ())

    def family_records(self, family: Recording[Any, Any, R]) -> tuple[R, ...]:
        """The family's records, as its own type: they were made (or decoded) by that family."""
        return cast(tuple[R, ...], self.of(family.name))

    def with_state(self, state: ClaimState) -> ClaimEntry:
        return replace(self, state=state)

    def with_records(self, family: Family, records: Iterable[object]) -> ClaimEntry:
        mine = {f: r for f, r in self.records}
        mine[family] = tuple(records)
        return replace(self, records=records_of(mine))

    def to_dict(self) -> dict[str, Any]:
        out: dict[str, Any] = {
            "uid": self.uid,
            "namespace": self.namespace,
            "name": self.name,
            "state": self.state.value,
            "devices": [_device_to_dict(d) for d in self.devices],
            "claimDir": self.has_claim_dir,
        }
        # every family's key is written, empty or not, so the previous version can read the file
        for f in families.recording():
            out[f.record_key] = [f.encode_record(r) for r in self.of(f.name)]
        return out

    @classmethod
    def from_dict(cls, d: Mapping[str, Any]) -> ClaimEntry:
        """Raises ValueError (or InvalidNameError for a UID that could name a path) on anything unexpected."""
        state = _field(d, "state", str)
        if state not in {s.value for s in ClaimState}:
            raise _MalformedError(
                f"field 'state' must be one of {[s.value for s in ClaimState]}, got {excerpt(state)}"
            )
        by_family: dict[Family, list[object]] = {}
        for f in families.recording():
            if f.record_key in d:
                by_family[f.name] = [f.decode_record(x) for x in _objects(d, f.record_key)]
        return cls(
            uid=ClaimUID(_field(d, "uid", str)),
            namespace=_field(d, "namespace", str),
            name=_field(d, "name", str),
            state=ClaimState(state),
            devices=tuple(_device_from_dict(x) for x in _objects(d, "devices")),
            records=records_of(by_family),
            has_claim_dir=bool(_field(d, "claimDir", bool, optional=True)),
        )


OfferKey = tuple[frozenset[Placement], frozenset[tuple[Family, frozenset[GpuUUID]]]]


@dataclass(frozen=True, slots=True)
class Checkpoint:
    boot_id: str
    claims: Mapping[ClaimUID, ClaimEntry] = field(default_factory=dict)
    # Per family, the GPUs whose node-wide state it changed (MIG mode switched on) and must restore.
    owned: Mapping[Family, frozenset[GpuUUID]] = field(default_factory=dict)

    def entry(self, uid: ClaimUID) -> ClaimEntry | None:
        return self.claims.get(uid)

    def with_entries(self, entries: Iterable[ClaimEntry]) -> Checkpoint:
        claims = dict(self.claims)
        claims.update((e.uid, e) for e in entries)
        return replace(self, claims=claims)

    def without(self, uids: Iterable[ClaimUID]) -> Checkpoint:
        drop = set(uids)
        return replace(self, claims={u: e for u, e in self.claims.items() if u not in drop})

    def owned_by(self, family: Family) -> frozenset[GpuUUID]:
        return self.owned.get(family, frozenset())

    def with_owned(self, family: Family, gpus: Iterable[GpuUUID]) -> Checkpoint:
        owned = {f: g for f, g in self.owned.items() if f != family}
        mine = frozenset(gpus)
        return replace(self, owned={**owned, family: mine} if mine else owned)

    def records(self, family: Family, *, excluding: ClaimUID | None = None) -> tuple[object, ...]:
        """Every claim's records of one family (but `excluding`'s)."""
        return tuple(r for e in self.claims.values() if e.uid != excluding for r in e.of(family))

    def placements(self) -> frozenset[Placement]:
        """Every MIG placement a claim holds: the live instances there are Tessera's."""
        return frozenset(p for f in families.placing() for p in f.placements(self.records(f.name)))

    def offer_key(self) -> OfferKey:
        """What of the checkpoint the node's slices depend on: the MIG placements claims hold, and the GPUs
        whose node-wide state (MIG mode) a family changed. A claim call that leaves it alone (a vgpu, MPS
        or whole-GPU claim) changes no slice."""
        return self.placements(), frozenset(self.owned.items())


def _canonical(obj: object) -> str:
    return json.dumps(obj, sort_keys=True, separators=(",", ":"))


@functools.lru_cache(maxsize=8192)
def _entry_json(entry: ClaimEntry) -> str:
    # Entries are immutable: a save re-serialises only the claims that changed.
    return _canonical(entry.to_dict())


def _owned_keys() -> list[tuple[str, Family]]:
    return sorted((f.owned_key, f.name) for f in families.placing())


def _body_json(cp: Checkpoint) -> str:
    """The canonical body (sorted keys, no spaces), built from cached entry fragments."""
    claims = ",".join(_entry_json(cp.claims[uid]) for uid in sorted(cp.claims))
    fields = {"bootID": json.dumps(cp.boot_id), "claims": f"[{claims}]"}
    for key, family in _owned_keys():
        fields[key] = json.dumps(sorted(cp.owned_by(family)), separators=(",", ":"))
    return "{" + ",".join(f"{json.dumps(k)}:{v}" for k, v in sorted(fields.items())) + "}"


def _digest(canonical: str) -> str:
    return "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()


def encode(cp: Checkpoint) -> bytes:
    body = _body_json(cp)
    head = json.dumps(
        {"apiVersion": API_VERSION, "kind": KIND, "checksum": _digest(body)}, separators=(",", ":")
    )
    return (head[:-1] + "," + body[1:]).encode()


_HEAD_PREFIX = f'{{"apiVersion":"{API_VERSION}","kind":"{KIND}","checksum":"'.encode()
HEAD_BYTES = len(_HEAD_PREFIX) + 80  # the prefix, "sha256:", 64 hex digits and the closing quote


def checksum_at_head(head: bytes) -> str | None:
    """The checksum `encode` wrote at the start of a checkpoint, from its first HEAD_BYTES (None: no
    checkpoint of this version starts so). It names the content, so it tells one save from another without
    reading the rest; `decode` still verifies the whole before anything is believed."""
    if not head.startswith(_HEAD_PREFIX):
        return None
    end = head.find(b'"', len(_HEAD_PREFIX))
    return head[len(_HEAD_PREFIX) : end].decode("ascii", "replace") if end > 0 else None


def decode(data: bytes, *, source: str = "checkpoint") -> Checkpoint:
    """Parse and verify; anything unexpected is a CheckpointError naming what is wrong.

    UnsupportedVersionError (a StorageError) for a checkpoint of another apiVersion of ours.
    """
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise CheckpointError(f"{source}: not valid JSON ({clip(str(e), 200)}); the file is corrupt") from e
    if not isinstance(doc, dict):
        raise CheckpointError(f"{source}: not a JSON object; the file is corrupt")
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
        raise CheckpointError(
            f"{source}: apiVersion/kind {excerpt(api_version)}/{excerpt(kind)}, "
            f"expected {API_VERSION}/{KIND}; the file is corrupt"
        )
    body = {k: v for k, v in doc.items() if k not in ("apiVersion", "kind", "checksum")}
    try:
        intact = doc.get("checksum") == _digest(_canonical(body))
    except RecursionError:
        intact = False
    if not intact:
        raise CheckpointError(f"{source}: checksum mismatch; the file is corrupt or was edited by hand")
    try:
        entries = [ClaimEntry.from_dict(e) for e in _objects(body, "claims")]
        owned = {f: frozenset(GpuUUID(g) for g in _strings(body, key)) for key, f in _owned_keys()}
        boot_id = _field(body, "bootID", str)
    except (ValueError, InvalidNameError) as e:
        raise CheckpointError(f"{source}: malformed content ({e}); the file is corrupt") from e
    claims = {e.uid: e for e in entries}
    if len(claims) != len(entries):
        raise CheckpointError(f"{source}: a claim is listed twice; the file is corrupt")
    return Checkpoint(boot_id=boot_id, claims=claims, owned={f: g for f, g in owned.items() if g})
