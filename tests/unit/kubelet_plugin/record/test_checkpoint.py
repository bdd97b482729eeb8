from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.core import families
from dra_driver.core.families import mig, vgpu
from dra_driver.core.families.mig import MigRecord
from dra_driver.core.families.vgpu import GpuShare
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.inventory import Placement
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.record.checkpoint import (
    API_VERSION,
    KIND,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    decode,
    encode,
    records_of,
)
from kubelet_plugin.record.checkpoint_store import CheckpointStore, read_boot_id
from kubelet_plugin.record.results import PreparedDevice

DATA = Path(__file__).parent / "data"


def _at(gpu: str, profile_id: int, start: int) -> Placement:
    return Placement(GpuUUID(gpu), profile_id, start)


ENTRY = ClaimEntry(
    uid=ClaimUID("u1"),
    namespace="ns",
    name="c1",
    state=ClaimState.PREPARE_COMPLETED,
    devices=(
        PreparedDevice(("gpu",), "node", "gpu-0-vgpu", ("k8s.gpu.tessera.dev/claim=u1-gpu-0-vgpu-s",), "s"),
        PreparedDevice(
            ("mig",), "node", "gpu-1-mig-1g10gb-0", ("k8s.gpu.tessera.dev/claim=u1-gpu-1-mig-1g10gb-0",)
        ),
    ),
    records=records_of(
        {
            mig.NAME: (
                MigRecord("gpu-1-mig-1g10gb-0", _at("GPU-1", 19, 0), "1g.10gb", True, 3, 0, "MIG-1"),
                MigRecord("gpu-1-mig-3g40gb-4", _at("GPU-1", 9, 4), "3g.40gb", False, 1, 0, "MIG-admin"),
            ),
            vgpu.NAME: (GpuShare(GpuUUID("GPU-0"), 1, 30, False),),
        }
    ),
    has_claim_dir=True,
)
STARTED = ClaimEntry(
    uid=ClaimUID("u2"),
    namespace="ns",
    name="c2",
    state=ClaimState.PREPARE_STARTED,
    records=records_of({mig.NAME: (MigRecord("gpu-0-mig-7g80gb-0", _at("GPU-0", 0, 0), "7g.80gb"),)}),
)
CP = Checkpoint(boot_id="boot-1", owned={mig.NAME: frozenset({GpuUUID("GPU-0")})}).with_entries(
    [ENTRY, STARTED]
)


def test_round_trip() -> None:
    data = encode(CP)
    assert decode(data) == CP
    doc = json.loads(data)
    assert (doc["apiVersion"], doc["kind"], doc["bootID"]) == (API_VERSION, KIND, "boot-1")
    assert doc["checksum"].startswith("sha256:")
    assert [c["state"] for c in doc["claims"]] == ["PrepareCompleted", "PrepareStarted"]


def test_a_checkpoint_of_the_first_layout_reads_and_writes_back_what_it_said() -> None:
    # written by the version before the family seam (three families): same apiVersion; what it holds is read
    # unchanged, and written back with an empty list for each family it did not know (which it ignores)
    old = (DATA / "checkpoint-v1-first-layout.json").read_bytes().strip()
    assert decode(old) == CP
    then, now = json.loads(old), json.loads(encode(CP))
    added = {f.record_key for f in families.recording()} - set(then["claims"][0])
    assert added == {"mps"}
    assert [{k: v for k, v in c.items() if k not in added} for c in now["claims"]] == then["claims"]
    assert all(c[k] == [] for c in now["claims"] for k in added)


def test_queries() -> None:
    assert CP.entry(ClaimUID("u1")) == ENTRY and CP.entry(ClaimUID("nope")) is None
    # the administrator's instance is not ours
    assert sorted(CP.placements()) == [_at("GPU-0", 0, 0), _at("GPU-1", 19, 0)]
    assert CP.records(mig.NAME, excluding=ClaimUID("u1")) == STARTED.of(mig.NAME)
    assert CP.owned_by(mig.NAME) == {"GPU-0"} and CP.owned_by(vgpu.NAME) == frozenset()
    assert set(CP.without([ClaimUID("u1")]).claims) == {"u2"}
    assert ENTRY.with_state(ClaimState.UNPREPARE_STARTED).state is ClaimState.UNPREPARE_STARTED


def test_the_offer_key_moves_only_with_what_changes_the_slices() -> None:
    base = Checkpoint(boot_id="boot-1")
    shared = ClaimEntry(
        uid=ClaimUID("u3"),
        namespace="ns",
        name="c3",
        state=ClaimState.PREPARE_COMPLETED,
        records=records_of({vgpu.NAME: (GpuShare(GpuUUID("GPU-0"), 2, 20, False),)}),
    )
    # a vgpu claim (or MPS, or a whole GPU) changes nothing the slices say
    assert base.with_entries([shared]).offer_key() == base.offer_key()
    # a MIG instance a claim holds, or MIG mode a family switched, does
    assert base.with_entries([STARTED]).offer_key() != base.offer_key()
    assert base.with_owned(mig.NAME, [GpuUUID("GPU-0")]).offer_key() != base.offer_key()
    assert CP.offer_key() == (CP.placements(), frozenset({(mig.NAME, frozenset({GpuUUID("GPU-0")}))}))


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
