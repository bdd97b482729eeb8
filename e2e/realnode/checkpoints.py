"""The two records of what is prepared on the real node: the kubelet's DRA checkpoint
(`<root-dir>/dra_manager_state`, `checkpoint.dra.kubelet.k8s.io/v1 DRACheckpoint` wrapped in `{"Data": ...,
"Checksum": ...}`) and the plugin's own (read with its own decoder), reduced to one comparable shape."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dra_driver.vocabulary.names import DRIVER_NAME
from e2e.realnode.errors import RealNodeError
from kubelet_plugin.record.checkpoint import ClaimState
from kubelet_plugin.record.checkpoint_store import CheckpointStore

KUBELET_CHECKPOINT_KIND = "DRACheckpoint"


@dataclass(frozen=True, slots=True)
class PreparedClaim:
    uid: str
    namespace: str
    name: str
    devices: frozenset[tuple[str, str, str | None, tuple[str, ...]]]  # (pool, device, share ID, CDI ids)


def _kubelet_claim_infos(path: Path) -> list[dict[str, Any]]:
    try:
        outer = json.loads(path.read_text())
    except FileNotFoundError:
        return []
    data = json.loads(outer["Data"])
    if data.get("kind") != KUBELET_CHECKPOINT_KIND:
        raise RealNodeError(f"{path}: kind {data.get('kind')!r}, expected {KUBELET_CHECKPOINT_KIND}")
    infos: list[dict[str, Any]] = data.get("ClaimInfoStateList") or []
    return infos


def kubelet_prepared(path: Path, *, driver: str = DRIVER_NAME) -> dict[str, PreparedClaim]:
    """Claims the kubelet has prepared with `driver`, by UID; empty when it has no checkpoint yet."""
    claims = {}
    for info in _kubelet_claim_infos(path):
        state = (info.get("DriverState") or {}).get(driver)
        if state is None:
            continue
        devices = frozenset(
            (d["PoolName"], d["DeviceName"], d.get("ShareID"), tuple(d.get("CDIDeviceIDs") or ()))
            for d in state["Devices"] or []
        )
        claims[info["ClaimUID"]] = PreparedClaim(
            uid=info["ClaimUID"], namespace=info["Namespace"], name=info["ClaimName"], devices=devices
        )
    return claims


def kubelet_claim_pods(path: Path, *, driver: str = DRIVER_NAME) -> dict[str, frozenset[str]]:
    """For each claim the kubelet has prepared with `driver`: the UIDs of the pods it holds it for."""
    return {
        info["ClaimUID"]: frozenset(info.get("PodUIDs") or {})
        for info in _kubelet_claim_infos(path)
        if driver in (info.get("DriverState") or {})
    }


def plugin_prepared(path: Path) -> dict[str, PreparedClaim]:
    """Claims Tessera's checkpoint holds as PrepareCompleted, by UID."""
    checkpoint = CheckpointStore(path=path).load(boot_id="")
    return {
        str(e.uid): PreparedClaim(
            uid=str(e.uid),
            namespace=e.namespace,
            name=e.name,
            devices=frozenset(
                (d.pool_name, d.device_name, d.share_id, tuple(d.cdi_device_ids)) for d in e.devices
            ),
        )
        for e in checkpoint.claims.values()
        if e.state is ClaimState.PREPARE_COMPLETED
    }


def plugin_entries(path: Path) -> dict[str, str]:
    """Every entry of Tessera's checkpoint, whatever its state: UID → state."""
    checkpoint = CheckpointStore(path=path).load(boot_id="")
    return {str(e.uid): e.state.value for e in checkpoint.claims.values()}
