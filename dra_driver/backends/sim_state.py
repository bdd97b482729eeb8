"""The simulated GPUs' mutable state (MIG mode, live instances), persisted in a versioned JSON file so a
daemon restart sees what the previous process created, as a real driver would."""

from __future__ import annotations

import json
from collections.abc import Mapping
from dataclasses import dataclass, replace
from pathlib import Path

from dra_driver.backends.decoding import (
    check_fields,
    check_header,
    expect_list,
    expect_mapping,
    get_typed,
)
from dra_driver.io.files import atomic_write
from dra_driver.vocabulary.errors import ConfigError, StorageError
from dra_driver.vocabulary.inventory import FaultKind, GpuFault
from dra_driver.vocabulary.names import SIM_API_VERSION, SIM_STATE_KIND, GpuUUID


@dataclass(frozen=True, slots=True)
class SimInstance:
    profile_id: int
    start: int
    gi_id: int
    ci_id: int
    uuid: str
    gi_cap_minor: int
    ci_cap_minor: int


@dataclass(frozen=True, slots=True)
class SimGpuState:
    mig_enabled: bool
    instances: tuple[SimInstance, ...] = ()
    faults: tuple[GpuFault, ...] = ()  # injected from outside (`tessera sim inject`) until cleared


@dataclass(frozen=True, slots=True)
class SimState:
    gpus: Mapping[GpuUUID, SimGpuState]

    def of(self, gpu: GpuUUID) -> SimGpuState:
        return self.gpus[gpu]

    def with_gpu(self, gpu: GpuUUID, state: SimGpuState) -> SimState:
        return replace(self, gpus={**self.gpus, gpu: state})

    def used_cap_minors(self) -> set[int]:
        return {m for g in self.gpus.values() for i in g.instances for m in (i.gi_cap_minor, i.ci_cap_minor)}


def encode_state(state: SimState) -> dict[str, object]:
    return {
        "apiVersion": SIM_API_VERSION,
        "kind": SIM_STATE_KIND,
        "gpus": {
            uuid: {
                "migEnabled": g.mig_enabled,
                "instances": [
                    {
                        "profileId": i.profile_id,
                        "start": i.start,
                        "giId": i.gi_id,
                        "ciId": i.ci_id,
                        "uuid": i.uuid,
                        "giCapMinor": i.gi_cap_minor,
                        "ciCapMinor": i.ci_cap_minor,
                    }
                    for i in g.instances
                ],
                **({"faults": [_encode_fault(f) for f in g.faults]} if g.faults else {}),
            }
            for uuid, g in sorted(state.gpus.items())
        },
    }


def _encode_fault(f: GpuFault) -> dict[str, object]:
    out: dict[str, object] = {"kind": f.kind.value}
    if f.xid is not None:
        out["xid"] = f.xid
    if f.detail:
        out["detail"] = f.detail
    return out


def _decode_fault(raw: object, where: str) -> GpuFault:
    data = expect_mapping(raw, where)
    check_fields(data, where, required={"kind"}, optional={"xid", "detail"})
    kind = get_typed(data, "kind", str, where, "")
    try:
        fault_kind = FaultKind(kind)
    except ValueError as e:
        known = ", ".join(k.value for k in FaultKind)
        raise ConfigError(f"{where}.kind: {kind!r} is not one of {known}") from e
    xid = data.get("xid")
    if xid is not None and (not isinstance(xid, int) or isinstance(xid, bool) or xid < 0):
        raise ConfigError(f"{where}.xid: expected a non-negative integer, got {xid!r}")
    return GpuFault(kind=fault_kind, xid=xid, detail=get_typed(data, "detail", str, where, ""))


_INSTANCE_FIELDS = {"profileId", "start", "giId", "ciId", "uuid", "giCapMinor", "ciCapMinor"}


def _decode_instance(raw: object, where: str) -> SimInstance:
    data = expect_mapping(raw, where)
    check_fields(data, where, required=_INSTANCE_FIELDS, optional=set())
    return SimInstance(
        profile_id=get_typed(data, "profileId", int, where, 0),
        start=get_typed(data, "start", int, where, 0),
        gi_id=get_typed(data, "giId", int, where, 0),
        ci_id=get_typed(data, "ciId", int, where, 0),
        uuid=get_typed(data, "uuid", str, where, ""),
        gi_cap_minor=get_typed(data, "giCapMinor", int, where, 0),
        ci_cap_minor=get_typed(data, "ciCapMinor", int, where, 0),
    )


def decode_state(raw: object) -> SimState:
    data = expect_mapping(raw, "state")
    check_fields(data, "", required={"apiVersion", "kind", "gpus"}, optional=set())
    check_header(data, "", api_version=SIM_API_VERSION, kind=SIM_STATE_KIND)
    gpus: dict[GpuUUID, SimGpuState] = {}
    for uuid, raw_gpu in expect_mapping(data["gpus"], "gpus").items():
        where = f"gpus[{uuid}]"
        g = expect_mapping(raw_gpu, where)
        check_fields(g, where, required={"migEnabled", "instances"}, optional={"faults"})
        instances = tuple(
            _decode_instance(r, f"{where}.instances[{k}]")
            for k, r in enumerate(expect_list(g["instances"], f"{where}.instances"))
        )
        faults = tuple(
            _decode_fault(r, f"{where}.faults[{k}]")
            for k, r in enumerate(expect_list(g.get("faults", []), f"{where}.faults"))
        )
        gpus[GpuUUID(uuid)] = SimGpuState(
            mig_enabled=get_typed(g, "migEnabled", bool, where, False), instances=instances, faults=faults
        )
    return SimState(gpus=gpus)


def read_state(path: Path) -> SimState | None:
    """The saved state, or None when no file exists yet."""
    try:
        text = path.read_text(encoding="utf-8")
    except FileNotFoundError:
        return None
    except OSError as e:
        raise StorageError(f"cannot read simulated GPU state {path}: {e.strerror}") from e
    try:
        return decode_state(json.loads(text))
    except (ValueError, ConfigError) as e:
        raise StorageError(f"simulated GPU state {path} is corrupt ({e}); delete it to start afresh") from e


def write_state(path: Path, state: SimState) -> None:
    """A crash leaves the old or the new state, never half of one."""
    atomic_write(path, json.dumps(encode_state(state), indent=1, sort_keys=True).encode())
