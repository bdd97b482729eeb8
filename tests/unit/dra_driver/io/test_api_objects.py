from __future__ import annotations

from urllib.parse import unquote

import pytest
from hypothesis import given
from hypothesis import strategies as st

from dra_driver.io.api_objects import CLAIM, NODE, field_at, path
from dra_driver.vocabulary.errors import InvalidNameError


def test_a_path_fills_its_template() -> None:
    assert path(NODE, name="gpu-1") == "/api/v1/nodes/gpu-1"
    assert path(CLAIM, namespace="ns", name="c") == "/apis/resource.k8s.io/v1/namespaces/ns/resourceclaims/c"


@pytest.mark.parametrize("name", ["", ".", ".."])
def test_a_name_a_url_resolves_away_is_refused(name: str) -> None:
    with pytest.raises(
        InvalidNameError, match=r"name .* is no object's name: the path /api/v1/nodes/\{name\}"
    ):
        path(NODE, name=name)
    with pytest.raises(InvalidNameError, match="namespace"):
        path(CLAIM, namespace=name, name="c")


@given(st.text(min_size=1).filter(lambda s: s not in (".", "..")))
def test_a_name_stays_one_segment_and_reads_back(name: str) -> None:
    segment = path(NODE, name=name).removeprefix("/api/v1/nodes/")
    assert "/" not in segment and "?" not in segment and "#" not in segment
    assert unquote(segment) == name


def test_a_field_or_none_where_a_level_is_not_an_object() -> None:
    claim = {"status": {"reservedFor": [{"name": "p"}]}, "metadata": "not an object"}
    assert field_at(claim, "status", "reservedFor") == [{"name": "p"}]
    assert field_at(claim, "metadata", "uid") is None
    assert field_at(claim, "spec", "devices") is None
    assert field_at(["a", "list"], "status") is None
    assert field_at(claim) is claim
