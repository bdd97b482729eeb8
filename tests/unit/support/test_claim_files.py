"""Claims in a directory: what the integration tests and the benchmark feed the daemon."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.vocabulary.errors import ClaimError, ClaimNotFoundError
from kubelet_plugin.claims.api import to_api_dict
from kubelet_plugin.serving.options import DaemonOptions
from tests.support.claim_files import DirectoryClaimSource, directory_claims
from tests.support.sample_claims import claim_ref, vgpu_claim


def test_directory_source_round_trip(tmp_path: Path) -> None:
    source = DirectoryClaimSource(root=tmp_path)
    written = vgpu_claim("c", pool="p", namespace="ns")
    assert source.put(written) == tmp_path / "ns" / "c.json"
    claim = source.get(namespace="ns", name="c")
    assert type(claim).__name__ == "ResourceV1ResourceClaim"
    assert to_api_dict(claim) == written
    source.put(claim)  # a model object is stored in its API form
    assert to_api_dict(source.get(namespace="ns", name="c")) == written
    assert source.delete(namespace="ns", name="c")
    assert not source.delete(namespace="ns", name="c")
    with pytest.raises(ClaimNotFoundError, match="ns/c not found"):
        source.get(namespace="ns", name="c")


def test_directory_source_reads_yaml_and_rejects_garbage(tmp_path: Path) -> None:
    (tmp_path / "ns").mkdir()
    (tmp_path / "ns" / "y.yaml").write_text(
        "apiVersion: resource.k8s.io/v1\nkind: ResourceClaim\nmetadata: {name: y, uid: u}\n"
    )
    assert DirectoryClaimSource(root=tmp_path).get(namespace="ns", name="y").metadata.uid == "u"
    (tmp_path / "ns" / "bad.yaml").write_text("metadata: [")
    with pytest.raises(ClaimError, match="is not a ResourceClaim object"):
        DirectoryClaimSource(root=tmp_path).get(namespace="ns", name="bad")


def test_directory_claims_serve_a_daemon_without_an_api_server(tmp_path: Path) -> None:
    claim = vgpu_claim("half", pool="node-a", gpu=2)
    DirectoryClaimSource(root=tmp_path).put(claim)
    access = directory_claims(tmp_path)(DaemonOptions(node_name="node-a"))
    ref = claim_ref(claim)
    got = access.source.get(namespace=ref.namespace, name=ref.name)
    assert (got.metadata.uid, got.status.allocation.devices.results[0].device) == (ref.uid, "gpu-2-vgpu")
    assert access.api is None
