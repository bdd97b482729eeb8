from __future__ import annotations

from datetime import UTC, datetime

from kubelet_plugin.claims.api import DeviceStatus, claim_from_dict, status_devices, to_api_dict

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


def test_claim_codec_round_trip() -> None:
    claim = claim_from_dict(CLAIM)
    assert type(claim).__name__ == "ResourceV1ResourceClaim"
    assert claim.status.allocation.devices.results[0].share_id == "s"
    assert to_api_dict(claim) == CLAIM
