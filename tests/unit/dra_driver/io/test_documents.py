"""Opening a versioned document: ours, another version of ours, or not ours at all."""

from __future__ import annotations

import pytest

from dra_driver.io.documents import open_document
from dra_driver.vocabulary.errors import StorageError, UnsupportedVersionError


def test_our_document_opens() -> None:
    doc = open_document(b'{"apiVersion": "x.tessera.dev/v1", "kind": "K", "a": 1}', source="f",
                        api_version="x.tessera.dev/v1", kind="K")  # fmt: skip
    assert doc["a"] == 1


@pytest.mark.parametrize(
    ("data", "error", "message"),
    [
        (b'{"apiVersion": "x.tessera.dev/v9", "kind": "K"}', UnsupportedVersionError, "leaves it as it is"),
        (b'{"apiVersion": "x.tessera.dev/v1", "kind": "L"}', StorageError, "expected x.tessera.dev/v1/K"),
        (b'{"apiVersion": "y.tessera.dev/v1", "kind": "K"}', StorageError, "the file is corrupt"),
        (b"[1]", StorageError, "not a JSON object"),
        (b"\xff", StorageError, "not valid JSON"),
        (b"[" * 100000, StorageError, "not valid JSON"),
    ],
)
def test_anything_else_says_what_is_wrong(data: bytes, error: type[Exception], message: str) -> None:
    with pytest.raises(error, match=message):
        open_document(data, source="f", api_version="x.tessera.dev/v1", kind="K")
