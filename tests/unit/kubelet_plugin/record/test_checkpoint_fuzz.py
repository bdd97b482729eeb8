"""A bounded, seeded fuzz pass over the checkpoint decoder: any bytes on disk give a Checkpoint (which then
round-trips) or a StorageError; never another exception that would stop the daemon from starting."""

from __future__ import annotations

import hashlib
import json
from typing import Any

from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from dra_driver.core.families import mig, vgpu
from dra_driver.core.families.mig import MigRecord
from dra_driver.core.families.vgpu import GpuShare
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.inventory import Placement
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.record.checkpoint import (
    API_VERSION,
    HEAD_BYTES,
    KIND,
    Checkpoint,
    ClaimEntry,
    ClaimState,
    checksum_at_head,
    decode,
    encode,
    records_of,
)
from kubelet_plugin.record.results import PreparedDevice

FUZZ = settings(
    max_examples=300,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
)

uids = st.from_regex(r"[0-9a-z][0-9a-z-]{0,20}", fullmatch=True).map(ClaimUID)
names = st.text(max_size=12)
small = st.integers(min_value=0, max_value=1 << 40)
mig_records = st.builds(
    MigRecord,
    device=names,
    placement=st.builds(Placement, names.map(GpuUUID), small, small),
    profile_name=names,
    created_by_tessera=st.booleans(),
    gi_id=st.none() | small,
    ci_id=st.none() | small,
    uuid=st.none() | names,
)
shares = st.builds(GpuShare, names.map(GpuUUID), st.integers(1, 65535), st.integers(0, 100), st.booleans())
device_records = st.builds(
    PreparedDevice,
    request_names=st.lists(names, max_size=2).map(tuple),
    pool_name=names,
    device_name=names,
    cdi_device_ids=st.lists(names, max_size=2).map(tuple),
    share_id=st.none() | names,
)
entries = st.builds(
    ClaimEntry,
    uid=uids,
    namespace=names,
    name=names,
    state=st.sampled_from(ClaimState),
    devices=st.lists(device_records, max_size=2).map(tuple),
    records=st.builds(
        lambda m, v: records_of({mig.NAME: m, vgpu.NAME: v}),
        st.lists(mig_records, max_size=2),
        st.lists(shares, max_size=2),
    ),
    has_claim_dir=st.booleans(),
)
checkpoints = st.builds(
    lambda boot, es, owned: Checkpoint(boot_id=boot).with_entries(es).with_owned(mig.NAME, owned),
    names,
    st.lists(entries, max_size=4),
    st.frozensets(names.map(GpuUUID), max_size=3),
)

json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats(allow_nan=False) | st.text(max_size=8),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=10,
)


def signed(body: dict[str, Any]) -> bytes:
    """A document with a correct checksum, so the decoder's field checks are what is exercised."""
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    checksum = "sha256:" + hashlib.sha256(canonical.encode()).hexdigest()
    return json.dumps({"apiVersion": API_VERSION, "kind": KIND, "checksum": checksum, **body}).encode()


def decodes_or_refuses(data: bytes) -> None:
    try:
        cp = decode(data, source="fuzz")
    except StorageError as e:
        assert str(e).startswith("fuzz") and len(str(e)) < 1200
        return
    # nothing a decoded checkpoint names can step out of the claims root or the CDI directory
    assert all("/" not in uid and uid.strip(".") for uid in cp.claims)
    assert decode(encode(cp)) == cp


@FUZZ
@given(checkpoints)
def test_what_encode_writes_decode_reads(cp: Checkpoint) -> None:
    assert decode(encode(cp)) == cp


@FUZZ
@given(
    cp=checkpoints,
    cut=st.integers(min_value=0),
    flips=st.lists(st.tuples(st.integers(0), st.integers(0, 255))),
)
def test_cut_or_bit_flipped_files(cp: Checkpoint, cut: int, flips: list[tuple[int, int]]) -> None:
    data = bytearray(encode(cp))
    data = data[: cut % (len(data) + 1)]
    for where, byte in flips:
        if data:
            data[where % len(data)] = byte
    decodes_or_refuses(bytes(data))


@FUZZ
@given(
    st.fixed_dictionaries(
        {},
        optional={
            "bootID": json_values | names,
            "migModeOwned": json_values | st.lists(names),
            "claims": json_values
            | st.lists(
                st.fixed_dictionaries(
                    {},
                    optional={
                        k: json_values | st.sampled_from(["PrepareCompleted", "u1", "../x", "", 3, True])
                        for k in ("uid", "namespace", "name", "state", "devices", "mig", "claimDir")
                    },
                ),
                max_size=3,
            ),
        },
    )
)
def test_well_signed_documents_of_any_shape(body: dict[str, Any]) -> None:
    decodes_or_refuses(signed(body))


@FUZZ
@given(st.binary(max_size=300) | st.integers(1, 100_000).map(lambda n: b"[" * n))
def test_garbage(data: bytes) -> None:
    decodes_or_refuses(data)


@FUZZ
@given(checkpoints)
def test_the_head_names_the_checksum_decode_verifies(cp: Checkpoint) -> None:
    data = encode(cp)
    assert checksum_at_head(data[:HEAD_BYTES]) == json.loads(data)["checksum"]


@FUZZ
@given(cp=checkpoints, cut=st.integers(min_value=0), junk=st.binary(max_size=HEAD_BYTES))
def test_a_cut_or_foreign_head_names_no_checksum_or_a_prefix_of_it(
    cp: Checkpoint, cut: int, junk: bytes
) -> None:
    data = encode(cp)
    head = data[: cut % (HEAD_BYTES + 1)]
    got = checksum_at_head(head)
    assert got is None or json.loads(data)["checksum"].startswith(got)
    assert checksum_at_head(junk) is None or junk.startswith(b'{"apiVersion"')
