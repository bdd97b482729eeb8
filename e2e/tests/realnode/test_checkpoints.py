"""The kubelet's DRA checkpoint and Tessera's, reduced to one shape: a claim reads the same from both."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.vocabulary.names import ClaimUID
from e2e.realnode.checkpoints import kubelet_claim_pods, kubelet_prepared, plugin_entries, plugin_prepared
from e2e.realnode.errors import RealNodeError
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from kubelet_plugin.record.results import PreparedDevice

UID = "697be8bd-8ca7-4b03-b01c-42cc59196c4f"
SHARE = "87faf374-434e-4e05-84a2-2e75d8435980"
CDI_ID = f"k8s.gpu.tessera.dev/claim={UID}-gpu-0-vgpu-{SHARE}"
POD = "8f222786-648b-432b-8cf3-9f5982e96347"


def kubelet_file(path: Path, *, kind: str = "DRACheckpoint") -> Path:
    """As a v1.36 kubelet wrote it (taken from a real node's dra_manager_state)."""
    data = {
        "kind": kind,
        "apiVersion": "checkpoint.dra.kubelet.k8s.io/v1",
        "ClaimInfoStateList": [
            {
                "ClaimUID": UID,
                "ClaimName": "vgpu-gpu-qkhdr",
                "Namespace": "default",
                "PodUIDs": {POD: {}},
                "DriverState": {
                    "gpu.tessera.dev": {
                        "Devices": [
                            {
                                "PoolName": "real-1",
                                "DeviceName": "gpu-0-vgpu",
                                "ShareID": SHARE,
                                "RequestNames": ["gpu"],
                                "CDIDeviceIDs": [CDI_ID],
                            }
                        ]
                    }
                },
            }
        ],
    }
    path.write_text(json.dumps({"Data": json.dumps(data), "Checksum": 1974723907}))
    return path


def test_the_same_claim_reads_the_same_from_both(tmp_path: Path) -> None:
    entry = ClaimEntry(
        uid=ClaimUID(UID),
        namespace="default",
        name="vgpu-gpu-qkhdr",
        state=ClaimState.PREPARE_COMPLETED,
        devices=(
            PreparedDevice(
                request_names=("gpu",),
                pool_name="real-1",
                device_name="gpu-0-vgpu",
                cdi_device_ids=(CDI_ID,),
                share_id=SHARE,
            ),
        ),
        has_claim_dir=True,
    )
    ours = tmp_path / "checkpoint.json"
    CheckpointStore(path=ours).save(Checkpoint(boot_id="b").with_entries([entry]))
    theirs = kubelet_file(tmp_path / "dra_manager_state")
    assert plugin_prepared(ours) == kubelet_prepared(theirs)
    assert kubelet_claim_pods(theirs) == {UID: frozenset({POD})}
    assert plugin_entries(ours) == {UID: "PrepareCompleted"}


def test_started_entries_are_not_prepared(tmp_path: Path) -> None:
    entry = ClaimEntry(uid=ClaimUID(UID), namespace="n", name="c", state=ClaimState.PREPARE_STARTED)
    ours = tmp_path / "checkpoint.json"
    CheckpointStore(path=ours).save(Checkpoint(boot_id="b").with_entries([entry]))
    assert plugin_prepared(ours) == {}
    assert plugin_entries(ours) == {UID: "PrepareStarted"}


def test_missing_files_are_empty_and_a_foreign_kind_is_refused(tmp_path: Path) -> None:
    assert kubelet_prepared(tmp_path / "none") == {} and plugin_prepared(tmp_path / "none") == {}
    with pytest.raises(RealNodeError, match="DRACheckpoint"):
        kubelet_prepared(kubelet_file(tmp_path / "x", kind="Other"))
