"""Names that become paths: the claim UID is checked wherever it is made."""

from __future__ import annotations

import json

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.core.families import mig
from dra_driver.core.families.mig import ProfileSize, profile_size
from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.names import (
    ClaimUID,
    cdi_spec_file_name,
    parse_cdi_spec_file_name,
    ready_file_name,
    ready_file_owner,
)


@pytest.mark.parametrize("uid", ["0b1c2d3e-aaaa-bbbb-cccc-000000000001", "u1", "A-9", "x" * 128])
def test_kubernetes_uids_are_claim_uids(uid: str) -> None:
    assert ClaimUID(uid) == uid and isinstance(ClaimUID(uid), str)
    assert ClaimUID(ClaimUID(uid)) == uid
    assert json.dumps({ClaimUID(uid): ClaimUID(uid)}) == json.dumps({uid: uid})


@pytest.mark.parametrize(
    "uid", ["", "..", "../../x", "a/b", "/abs", "-lead", ".hidden", "a b", "a\x00b", "u\n", "x" * 129]
)
def test_anything_that_could_leave_a_directory_is_refused(uid: str) -> None:
    with pytest.raises(InvalidNameError, match="is not a Kubernetes UID"):
        ClaimUID(uid)


def test_a_huge_uid_is_not_echoed() -> None:
    with pytest.raises(InvalidNameError) as info:
        ClaimUID("../" * 100_000)
    assert len(str(info.value)) < 300


def test_spec_file_names_parse_back_only_for_valid_uids() -> None:
    name = cdi_spec_file_name(ClaimUID("u1"))
    assert parse_cdi_spec_file_name(name) == "u1"
    assert parse_cdi_spec_file_name(name.replace("u1", "..")) is None
    assert parse_cdi_spec_file_name("nvidia.com-gpu.json") is None


def test_profile_size_reads_the_size_a_profile_name_states() -> None:
    assert profile_size("3g.40gb") == ProfileSize(3, 40, False)
    assert profile_size("1g.10gb+me") == ProfileSize(1, 10, True)
    # a trailing newline (`$` alone takes it) and non-ASCII digits (`\d` takes them) are no profile either
    for bad in (
        "1g10gb",
        "g.10gb",
        "1g.10gb-me",
        "",
        "xg.5gb",
        "1g.10gb\n",
        "\uff11g.10gb",
        "1g.\u0661\u0660gb",
    ):
        with pytest.raises(InvalidNameError):
            profile_size(bad)


@given(st.integers(0, 99), st.integers(0, 999), st.booleans())
def test_profile_size_round_trips_through_device_names(compute: int, memory: int, media: bool) -> None:
    profile = f"{compute}g.{memory}gb{'+me' if media else ''}"
    assert profile_size(profile) == ProfileSize(compute, memory, media)
    detail = mig.FAMILY.parse_name(mig.mig_device_name(0, profile, 0).removeprefix("gpu-0-"))
    assert isinstance(detail, mig.MigName) and detail.profile == profile


@given(st.one_of(st.none(), st.from_regex(r"[a-z0-9][a-z0-9-]{0,40}", fullmatch=True)))
def test_ready_file_names_parse_back_to_their_pod_uid(pod_uid: str | None) -> None:
    assert ready_file_owner(ready_file_name(pod_uid)) == (pod_uid or "")


@pytest.mark.parametrize("name", [".ready-", ".readyx", "ready", "dra.sock", "checkpoint.json", ".ready.tmp"])
def test_other_names_are_no_ready_files(name: str) -> None:
    assert ready_file_owner(name) is None
