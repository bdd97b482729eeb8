from __future__ import annotations

from datetime import UTC, datetime
from pathlib import Path

import pytest

from dra_driver.errors import ClaimError, ClaimNotFoundError
from kubelet_plugin.claims import DeviceStatus, DirectoryClaimSource, status_devices, to_api_dict

NOW = datetime(2026, 1, 2, 3, 4, 5, tzinfo=UTC)
CLAIM = {
    "apiVersion": "resource.k8s.io/v1",
    "kind": "ResourceClaim",
    "metadata": {"name": "c", "namespace": "ns", "uid": "u1"},
    "status": {
        "allocation": {
            "devices": {
                "results": [
                    {
                        "request": "r",
                        "driver": "gpu.tessera.dev",
                        "pool": "p",
                        "device": "gpu-0-vgpu",
                        "shareID": "s",
                    }
                ]
            }
        }
    },
}


def test_status_devices_replaces_ours_and_keeps_others() -> None:
    existing = [
        {"driver": "net.example.com", "pool": "p", "device": "nic-0"},
        {"driver": "gpu.tessera.dev", "pool": "p", "device": "gpu-9"},
    ]
    out = status_devices(
        existing,
        driver="gpu.tessera.dev",
        devices=[DeviceStatus(device="gpu-0-vgpu", pool="p", share_id="s", data={"limits": {"cores": 50}})],
        now=NOW,
    )
    assert out[0] == existing[0]
    assert out[1] == {
        "driver": "gpu.tessera.dev",
        "pool": "p",
        "device": "gpu-0-vgpu",
        "shareID": "s",
        "data": {"limits": {"cores": 50}},
        "conditions": [
            {
                "type": "Ready",
                "status": "True",
                "reason": "Prepared",
                "message": "prepared by the node plugin",
                "lastTransitionTime": "2026-01-02T03:04:05Z",
            }
        ],
    }
    assert status_devices(existing, driver="gpu.tessera.dev", devices=[], now=NOW) == existing[:1]


def test_directory_source_round_trip(tmp_path: Path) -> None:
    source = DirectoryClaimSource(root=tmp_path)
    source.put(CLAIM)
    claim = source.get(namespace="ns", name="c")
    assert type(claim).__name__ == "ResourceV1ResourceClaim"
    assert claim.status.allocation.devices.results[0].share_id == "s"
    assert to_api_dict(claim)["status"] == CLAIM["status"]
    assert source.delete(namespace="ns", name="c")
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
