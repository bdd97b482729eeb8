from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.errors import StorageError
from dra_driver.names import ClaimUID, GpuUUID
from kubelet_plugin.checkpoint import (
    API_VERSION,
    KIND,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    DeviceRecord,
    MigRecord,
    decode,
    encode,
)
from kubelet_plugin.checkpoint_store import CheckpointStore, read_boot_id

ENTRY = ClaimEntry(
    uid=ClaimUID("u1"),
    namespace="ns",
    name="c1",
    state=ClaimState.PREPARE_COMPLETED,
    devices=(
        DeviceRecord(("gpu",), "node", "gpu-0-vgpu", ("k8s.gpu.tessera.dev/claim=u1-gpu-0-vgpu-s",), "s"),
        DeviceRecord(
            ("mig",), "node", "gpu-1-mig-1g10gb-0", ("k8s.gpu.tessera.dev/claim=u1-gpu-1-mig-1g10gb-0",)
        ),
    ),
    mig=(
        MigRecord("gpu-1-mig-1g10gb-0", GpuUUID("GPU-1"), 19, "1g.10gb", 0, True, 3, 0, "MIG-1"),
        MigRecord("gpu-1-mig-3g40gb-4", GpuUUID("GPU-1"), 9, "3g.40gb", 4, False, 1, 0, "MIG-admin"),
    ),
    has_claim_dir=True,
)
STARTED = ClaimEntry(
    uid=ClaimUID("u2"),
    namespace="ns",
    name="c2",
    state=ClaimState.PREPARE_STARTED,
    mig=(MigRecord("gpu-0-mig-7g80gb-0", GpuUUID("GPU-0"), 0, "7g.80gb", 0),),
)
CP = Checkpoint(boot_id="boot-1", mig_mode_owned=frozenset({GpuUUID("GPU-0")})).with_entries([ENTRY, STARTED])


def test_round_trip() -> None:
    data = encode(CP)
    assert decode(data) == CP
    doc = json.loads(data)
    assert (doc["apiVersion"], doc["kind"], doc["bootID"]) == (API_VERSION, KIND, "boot-1")
    assert doc["checksum"].startswith("sha256:")
    assert [c["state"] for c in doc["claims"]] == ["PrepareCompleted", "PrepareStarted"]


def test_queries() -> None:
    assert CP.entry(ClaimUID("u1")) == ENTRY and CP.entry(ClaimUID("nope")) is None
    assert [(e.uid, r.start) for e, r in CP.tessera_mig()] == [
        ("u1", 0),
        ("u2", 0),
    ]  # the admin's is not ours
    assert set(CP.without([ClaimUID("u1")]).claims) == {"u2"}
    assert ENTRY.with_state(ClaimState.UNPREPARE_STARTED).state is ClaimState.UNPREPARE_STARTED


@pytest.mark.parametrize(
    ("data", "needle"),
    [
        (b"{trunc", "not valid JSON"),
        (b"[]", "not a JSON object"),
        (encode(CP).replace(b'"boot-1"', b'"boot-2"'), "checksum mismatch"),
        (
            json.dumps({"apiVersion": "other/v1", "kind": KIND}).encode(),
            "expected checkpoint.tessera.dev/v1/Checkpoint",
        ),
    ],
)
def test_corruption_is_a_storage_error(data: bytes, needle: str) -> None:
    with pytest.raises(StorageError) as info:
        decode(data, source="checkpoint /x")
    assert needle in str(info.value) and "checkpoint /x" in str(info.value)


def test_store_round_trip_and_missing_file(tmp_path: Path) -> None:
    store = CheckpointStore(path=tmp_path / "plugin" / "checkpoint.json")
    assert store.load(boot_id="b") == Checkpoint(boot_id="b")
    store.save(CP)
    assert store.load(boot_id="other") == CP
    assert store.path.stat().st_mode & 0o777 == 0o600
    assert [p.name for p in store.path.parent.iterdir()] == ["checkpoint.json"]


def test_store_corrupt_file_and_set_aside(tmp_path: Path) -> None:
    store = CheckpointStore(path=tmp_path / "checkpoint.json")
    store.path.write_bytes(encode(CP)[:-10])
    with pytest.raises(StorageError, match="corrupt"):
        store.load(boot_id="b")
    aside = store.set_aside()
    # kept aside, and still in place until a new checkpoint replaces it (never a moment without one)
    assert aside.read_bytes() == store.path.read_bytes() == encode(CP)[:-10]
    assert aside.name.startswith("checkpoint.json.unreadable-")
    assert store.set_aside() != aside  # a second copy never overwrites the first
    store.save(CP)
    assert store.load(boot_id="b") == CP and aside.read_bytes() == encode(CP)[:-10]


def test_boot_id() -> None:
    assert len(read_boot_id()) == 36
    with pytest.raises(StorageError, match="boot id"):
        read_boot_id(Path("/nonexistent/boot_id"))
