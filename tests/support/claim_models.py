"""ResourceClaims built from the real `kubernetes` v1 model classes, as the scheduler leaves them."""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping, Sequence
from typing import Any

from kubernetes import client as k8s

from dra_driver.vocabulary.names import CONFIG_API_VERSION, DRIVER_NAME

POOL = "node-a"


def result(
    device: str,
    *,
    request: str = "gpu",
    pool: str = POOL,
    driver: str = DRIVER_NAME,
    share_id: str | None = None,
    consumed: Mapping[str, str] | None = None,
) -> Any:
    return k8s.V1DeviceRequestAllocationResult(
        request=request,
        driver=driver,
        pool=pool,
        device=device,
        share_id=share_id,
        consumed_capacity=dict(consumed) if consumed is not None else None,
    )


def vgpu_result(gpu: int = 0, *, memory: str = "20Gi", cores: str = "50", request: str = "gpu") -> Any:
    return result(
        f"gpu-{gpu}-vgpu",
        request=request,
        share_id=str(uuidlib.uuid4())[:8],
        consumed={"memory": memory, "cores": cores},
    )


def config(
    kind: str,
    *,
    requests: Sequence[str] = (),
    source: str = "FromClaim",
    driver: str = DRIVER_NAME,
    **fields: object,
) -> Any:
    params = {"apiVersion": CONFIG_API_VERSION, "kind": kind, **fields}
    return k8s.V1DeviceAllocationConfiguration(
        source=source,
        requests=list(requests) or None,
        opaque=k8s.V1OpaqueDeviceConfiguration(driver=driver, parameters=params),
    )


def claim(
    *results: Any,
    configs: Sequence[Any] = (),
    uid: str | None = None,
    name: str = "claim",
    namespace: str = "ns",
    allocated: bool = True,
) -> Any:
    status = None
    if allocated:
        status = k8s.V1ResourceClaimStatus(
            allocation=k8s.V1AllocationResult(
                devices=k8s.V1DeviceAllocationResult(results=list(results), config=list(configs) or None)
            )
        )
    return k8s.ResourceV1ResourceClaim(
        api_version="resource.k8s.io/v1",
        kind="ResourceClaim",
        metadata=k8s.V1ObjectMeta(name=name, namespace=namespace, uid=uid or str(uuidlib.uuid4())),
        spec=k8s.V1ResourceClaimSpec(
            devices=k8s.V1DeviceClaim(
                requests=[
                    k8s.V1DeviceRequest(
                        name=r.request, exactly=k8s.V1ExactDeviceRequest(device_class_name="x")
                    )
                    for r in results
                ]
            )
        ),
        status=status,
    )
