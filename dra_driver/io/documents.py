"""Opening one of Tessera's versioned JSON documents (pure): a JSON object of the expected apiVersion and
kind, or a StorageError that names what is wrong; UnsupportedVersionError when another version of ours
(same API group) wrote it, so that the caller leaves the file as it is."""

from __future__ import annotations

import json
from typing import Any

from dra_driver.vocabulary.errors import StorageError, UnsupportedVersionError
from dra_driver.vocabulary.excerpt import clip, excerpt


def open_document(data: bytes, *, source: str, api_version: str, kind: str) -> dict[str, Any]:
    try:
        doc = json.loads(data)
    except (ValueError, RecursionError) as e:
        raise StorageError(f"{source}: not valid JSON ({clip(str(e), 200)}); the file is corrupt") from e
    if not isinstance(doc, dict):
        raise StorageError(f"{source}: not a JSON object; the file is corrupt")
    found, found_kind = doc.get("apiVersion"), doc.get("kind")
    group = api_version.split("/", maxsplit=1)[0]
    if isinstance(found, str) and found.startswith(f"{group}/") and found != api_version:
        raise UnsupportedVersionError(
            f"{source} has apiVersion {excerpt(found)}: another (newer) version of Tessera wrote it; "
            f"this one reads {api_version} only and leaves it as it is"
        )
    if found != api_version or found_kind != kind:
        raise StorageError(
            f"{source}: apiVersion/kind {excerpt(found)}/{excerpt(found_kind)}, "
            f"expected {api_version}/{kind}; the file is corrupt"
        )
    return doc
