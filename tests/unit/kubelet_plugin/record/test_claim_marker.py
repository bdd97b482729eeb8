"""The checkpoint entry a claim's CDI spec carries, for rebuilding a lost checkpoint."""

from __future__ import annotations

import json

import pytest

from dra_driver.core.families import mig
from dra_driver.core.families.mig import MigRecord
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.inventory import Placement
from dra_driver.vocabulary.names import ClaimUID, GpuUUID
from kubelet_plugin.record.checkpoint import ClaimEntry, ClaimState, records_of
from kubelet_plugin.record.claim_marker import (
    ENTRY_ANNOTATION,
    marker_annotations,
    owned_annotation,
    parse_marker,
)

MIG_MODE_ANNOTATION = "gpu.tessera.dev/mig-mode-owned"  # the name the first layout wrote; specs outlive us
ENTRY = ClaimEntry(
    uid=ClaimUID("u1"),
    namespace="ns",
    name="c",
    state=ClaimState.PREPARE_STARTED,
    records=records_of(
        {
            mig.NAME: (
                MigRecord(
                    "gpu-1-mig-1g10gb-0", Placement(GpuUUID("GPU-1"), 19, 0), "1g.10gb", True, 3, 0, "MIG-1"
                ),
            )
        }
    ),
)


def test_round_trip_names_only_the_claims_own_gpus() -> None:
    assert owned_annotation("migModeOwned") == MIG_MODE_ANNOTATION
    owned = {mig.NAME: frozenset({GpuUUID("GPU-1"), GpuUUID("GPU-7")})}
    annotations = marker_annotations(ENTRY, owned=owned)
    assert annotations[MIG_MODE_ANNOTATION] == "GPU-1"
    marker = parse_marker(annotations, uid=ClaimUID("u1"))
    assert marker.entry == ENTRY.with_state(ClaimState.PREPARE_COMPLETED)
    assert marker.owned == {mig.NAME: {"GPU-1"}}
    other = {mig.NAME: frozenset({GpuUUID("GPU-7")})}
    assert MIG_MODE_ANNOTATION not in marker_annotations(ENTRY, owned=other)


@pytest.mark.parametrize(
    ("annotations", "needle"),
    [
        ({}, "carries no"),
        ({ENTRY_ANNOTATION: "{"}, "malformed"),
        ({ENTRY_ANNOTATION: "[]"}, "malformed"),
        ({ENTRY_ANNOTATION: json.dumps({**ENTRY.to_dict(), "uid": "../x"})}, "malformed"),
        ({ENTRY_ANNOTATION: json.dumps(ENTRY.to_dict())}, "names claim u1, the file claim u2"),
    ],
)
def test_a_bad_marker_is_a_storage_error(annotations: dict[str, str], needle: str) -> None:
    uid = ClaimUID("u2") if "u2" in needle else ClaimUID("u1")
    with pytest.raises(StorageError, match=needle):
        parse_marker(annotations, uid=uid)
