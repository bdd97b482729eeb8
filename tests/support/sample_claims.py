"""ResourceClaims as the scheduler leaves them (allocated to one device): tests, benchmark, stand-ins.

Plain dicts in the API's JSON shape, so `DirectoryClaimSource.put` stores exactly what an API server returns.
"""

from __future__ import annotations

import uuid
from collections.abc import Mapping
from typing import Any

from dra_driver.core.families import vgpu
from dra_driver.vocabulary.names import DRIVER_NAME, ClaimUID, Family, device_class_name
from kubelet_plugin.record.results import ClaimRef

REQUEST = "gpu"


def allocated_claim(
    name: str,
    *,
    device: str,
    family: Family,
    pool: str,
    namespace: str = "default",
    consumed: Mapping[str, str] | None = None,
    driver: str = DRIVER_NAME,
    uid: str | None = None,
) -> dict[str, Any]:
    result: dict[str, Any] = {"request": REQUEST, "driver": driver, "pool": pool, "device": device}
    if family == vgpu.NAME:
        result["shareID"] = str(uuid.uuid4())
    if consumed:
        result["consumedCapacity"] = dict(consumed)
    request: dict[str, Any] = {"deviceClassName": device_class_name(family)}
    if consumed:
        request["capacity"] = {"requests": dict(consumed)}
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace, "uid": uid or str(uuid.uuid4())},
        "spec": {"devices": {"requests": [{"name": REQUEST, "exactly": request}]}},
        "status": {"allocation": {"devices": {"results": [result]}}},
    }


def vgpu_claim(
    name: str, *, pool: str, gpu: int = 0, memory: str = "10Gi", cores: str = "50", namespace: str = "default"
) -> dict[str, Any]:
    return allocated_claim(
        name,
        namespace=namespace,
        device=f"gpu-{gpu}-vgpu",
        family=vgpu.NAME,
        pool=pool,
        consumed={"memory": memory, "cores": cores},
    )


def claim_ref(claim: Mapping[str, Any]) -> ClaimRef:
    meta = claim["metadata"]
    return ClaimRef(namespace=meta["namespace"], name=meta["name"], uid=ClaimUID(meta["uid"]))
