"""Hand-written ResourceSlices in the shape DESIGN.md gives Tessera's, for explain tests.

Two H100-like GPUs: whole device, vgpu device (multi-allocatable, memory/cores/shares), 1g.10gb placements 0-6
and 7g.80gb at 0, one counter set of 8 memory slices per GPU. Kept small on purpose; the real slice builder's
output is checked in test_deviceclasses.py.
"""

from __future__ import annotations

from typing import Any

DRIVER = "gpu.tessera.dev"
NODE = "node-a"
GIB = 1024**3


def _attrs(i: int, kind: str, **extra: Any) -> dict[str, Any]:
    out: dict[str, Any] = {
        "type": {"string": kind},
        "uuid": {"string": f"GPU-{i:08d}"},
        "productName": {"string": "NVIDIA H100 80GB HBM3"},
        "architecture": {"string": "Hopper"},
        "driverVersion": {"version": "550.54.15"},
        "index": {"int": i},
        "resource.kubernetes.io/pciBusID": {"string": f"0000:{i + 1:02x}:00.0"},
    }
    out.update(extra)
    return out


def _all_slices(n: int = 8) -> dict[str, dict[str, str]]:
    return {f"memory-slice-{k}": {"value": "1"} for k in range(n)}


def gpu_devices(i: int, *, shares: int = 2) -> list[dict[str, Any]]:
    cs = f"gpu-{i}-counters"
    devices: list[dict[str, Any]] = [
        {
            "name": f"gpu-{i}",
            "attributes": _attrs(i, "gpu"),
            "capacity": {"memory": {"value": "80Gi"}, "multiprocessors": {"value": "132"}},
            "consumesCounters": [{"counterSet": cs, "counters": _all_slices()}],
        },
        {
            "name": f"gpu-{i}-vgpu",
            "allowMultipleAllocations": True,
            "attributes": _attrs(i, "vgpu"),
            "capacity": {
                "memory": {
                    "value": "80Gi",
                    "requestPolicy": {
                        "default": "1Gi",
                        "validRange": {"min": "1Mi", "max": "80Gi", "step": "1Mi"},
                    },
                },
                "cores": {
                    "value": "100",
                    "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
                },
                "shares": {"value": str(shares), "requestPolicy": {"default": "1", "validValues": ["1"]}},
            },
            "consumesCounters": [{"counterSet": cs, "counters": _all_slices()}],
        },
    ]
    for start in range(7):
        devices.append(
            {
                "name": f"gpu-{i}-mig-1g10gb-{start}",
                "attributes": _attrs(
                    i, "mig", profile={"string": "1g.10gb"}, parentUUID={"string": f"GPU-{i:08d}"}
                ),
                "capacity": {"memory": {"value": "9984Mi"}, "multiprocessors": {"value": "16"}},
                "consumesCounters": [
                    {"counterSet": cs, "counters": {f"memory-slice-{start}": {"value": "1"}}}
                ],
            }
        )
    devices.append(
        {
            "name": f"gpu-{i}-mig-7g80gb-0",
            "attributes": _attrs(
                i, "mig", profile={"string": "7g.80gb"}, parentUUID={"string": f"GPU-{i:08d}"}
            ),
            "capacity": {"memory": {"value": "81152Mi"}, "multiprocessors": {"value": "132"}},
            "consumesCounters": [{"counterSet": cs, "counters": _all_slices()}],
        }
    )
    return devices


def node_slices(gpus: int = 2, *, node: str = NODE, shares: int = 2) -> list[dict[str, Any]]:
    pool = {"name": node, "generation": 1, "resourceSliceCount": 2}
    counters = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-counters"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": pool,
            "sharedCounters": [{"name": f"gpu-{i}-counters", "counters": _all_slices()} for i in range(gpus)],
        },
    }
    devices = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-devices"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": pool,
            "devices": [d for i in range(gpus) for d in gpu_devices(i, shares=shares)],
        },
    }
    return [counters, devices]


def allocated_claim(name: str, *results: tuple[str, dict[str, str]], node: str = NODE) -> dict[str, Any]:
    """A claim already allocated on `node`: (device, consumedCapacity) pairs."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": {"requests": [{"name": "r", "exactly": {"deviceClassName": "gpu.tessera.dev"}}]}},
        "status": {
            "allocation": {
                "devices": {
                    "results": [
                        {"request": "r", "driver": DRIVER, "pool": node, "device": dev}
                        | ({"consumedCapacity": consumed} if consumed else {})
                        for dev, consumed in results
                    ]
                }
            }
        },
    }


def claim(
    *requests: dict[str, Any], constraints: list[dict[str, Any]] | None = None, name: str = "c"
) -> dict[str, Any]:
    devices: dict[str, Any] = {"requests": list(requests)}
    if constraints:
        devices["constraints"] = constraints
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "default"},
        "spec": {"devices": devices},
    }


def exactly(name: str, device_class: str, *, selectors: tuple[str, ...] = (), **extra: Any) -> dict[str, Any]:
    body: dict[str, Any] = {"deviceClassName": device_class, **extra}
    if selectors:
        body["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    return {"name": name, "exactly": body}
