"""Claims kept in a directory instead of an API server, for tests and the benchmark.

`DirectoryClaimSource` serves the same `kubernetes` v1 model objects as the API adapter; `directory_claims`
gives a daemon (in-process, or `python -m tests.support.daemon --claims-dir-source DIR`) claims from there.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import yaml

from dra_driver.io.api_client import api_client
from dra_driver.io.files import atomic_write, remove_durably
from dra_driver.vocabulary.errors import ClaimError, ClaimNotFoundError
from kubelet_plugin.claims.api import NullClaimStatusWriter, claim_from_dict, to_api_dict
from kubelet_plugin.serving.node_setup import ClaimAccess, ClaimsFrom
from kubelet_plugin.serving.options import DaemonOptions


class DirectoryClaimSource:
    """Claims stored as `<root>/<namespace>/<name>.yaml` (or `.json`)."""

    def __init__(self, *, root: Path) -> None:
        self._root = root

    def _files(self, namespace: str, name: str) -> tuple[Path, ...]:
        base = self._root / namespace
        return tuple(base / f"{name}{ext}" for ext in (".json", ".yaml", ".yml"))

    def get(self, *, namespace: str, name: str) -> Any:
        for path in self._files(namespace, name):
            try:
                text = path.read_text()
            except FileNotFoundError:
                continue
            except OSError as e:
                raise ClaimError(f"reading claim file {path}: {e.strerror or e}") from e
            try:
                # JSON first: the C-accelerated parser is ~100x faster than YAML's pure-Python one
                data = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
                return claim_from_dict(data)
            except (yaml.YAMLError, ValueError, TypeError) as e:
                raise ClaimError(f"claim file {path} is not a ResourceClaim object: {e}") from e
        raise ClaimNotFoundError(f"ResourceClaim {namespace}/{name} not found in {self._root}")

    def put(self, claim: Mapping[str, Any] | Any) -> Path:
        """Store a claim (a dict or a v1 model object) atomically; returns its file."""
        data = claim if isinstance(claim, Mapping) else to_api_dict(claim)
        meta = data["metadata"]
        path = self._files(meta["namespace"], meta["name"])[0]
        atomic_write(path, json.dumps(data, default=str).encode())
        return path

    def delete(self, *, namespace: str, name: str) -> bool:
        return any([remove_durably(p) for p in self._files(namespace, name)])


def directory_claims(root: Path) -> ClaimsFrom:
    """Claims from `root`; a `--kubeconfig` given as well still serves publishing and Node events."""

    def access(options: DaemonOptions) -> ClaimAccess:
        api = api_client(options.kubeconfig) if options.kubeconfig is not None else None
        return ClaimAccess(DirectoryClaimSource(root=root), NullClaimStatusWriter(), api)

    return access
