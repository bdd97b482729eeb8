"""The claims the scale and fragmentation benchmarks ask for: one device per claim, by family, and a seeded
random mix (MIG 1g/2g/3g/4g/7g, vgpu of random sizes, whole GPUs; with `ALIGNED_MIX_WEIGHTS` also groups of
whole GPUs that must land together: docs/topology.md)."""

from __future__ import annotations

import random
from dataclasses import dataclass
from typing import Any

from dra_driver.vocabulary.names import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE, Attr, qualified

Json = dict[str, Any]
GIB = 1024**3


@dataclass(frozen=True, slots=True)
class Want:
    """One claim's request: what it is called in tables and its `exactly` request."""

    kind: str
    request: Json
    match: tuple[str, ...] = ()  # attributes every device of the request must share (matchAttribute)

    def claim(self, name: str, namespace: str) -> Json:
        devices: Json = {"requests": [{"name": "gpu", "exactly": self.request}]}
        if self.match:
            devices["constraints"] = [{"requests": ["gpu"], "matchAttribute": a} for a in self.match]
        return {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceClaim",
            "metadata": {"name": name, "namespace": namespace},
            "spec": {"devices": devices},
        }


def whole() -> Want:
    return Want("gpu", {"deviceClassName": "gpu.tessera.dev"})


NVLINK_DOMAIN = qualified(Attr.NVLINK_DOMAIN)


def aligned(count: int, *match: str) -> Want:
    """`count` whole GPUs that share the values of `match` (e.g. one NUMA node and NVLink domain)."""
    request = {"deviceClassName": "gpu.tessera.dev", "allocationMode": "ExactCount", "count": count}
    return Want(f"gpu-x{count}", request, match)


# The aligned requests of docs/topology.md: 4 GPUs of one NVLink domain on one NUMA node, 2 under one PCIe
# switch, 8 of one NVLink domain (the whole HGX board).
ALIGNED = {
    "gpu-x4": aligned(4, NVLINK_DOMAIN, NUMA_NODE_ATTRIBUTE),
    "gpu-x2": aligned(2, PCIE_ROOT_ATTRIBUTE),
    "gpu-x8": aligned(8, NVLINK_DOMAIN),
}


def vgpu(memory_gib: int, cores: int) -> Want:
    capacity = {"memory": f"{memory_gib}Gi", "cores": str(cores)}
    return Want(
        f"vgpu-{memory_gib}Gi", {"deviceClassName": "vgpu.tessera.dev", "capacity": {"requests": capacity}}
    )


def mig(profile: str) -> Want:
    return Want(profile, {"deviceClassName": f"mig-{profile.replace('+', '-')}.gpu.tessera.dev"})


# The mix: how often each kind arrives (weights), and the sizes a vgpu claim picks from.
MIX_WEIGHTS: dict[str, int] = {
    "1g.10gb": 30,
    "2g.20gb": 10,
    "3g.40gb": 8,
    "4g.40gb": 5,
    "7g.80gb": 4,
    "vgpu": 30,
    "gpu": 13,
}
# The mix with aligned multi-GPU arrivals (`make bench-order`'s aligned run): 4 and 2 whole GPUs that land
# together; 8 GPUs only fit an empty board, so they are probed (e2e/benches/scale/fragmentation.py), not
# asked for.
ALIGNED_MIX_WEIGHTS: dict[str, int] = {**MIX_WEIGHTS, "gpu-x4": 4, "gpu-x2": 4}
VGPU_GIB = (1, 2, 4, 8, 10, 16, 20, 24, 32, 40)
VGPU_CORES = (0, 10, 20, 25, 30, 50)


def random_want(rng: random.Random, weights: dict[str, int] = MIX_WEIGHTS) -> Want:
    kind = rng.choices(list(weights), list(weights.values()))[0]
    if kind == "vgpu":
        return vgpu(rng.choice(VGPU_GIB), rng.choice(VGPU_CORES))
    if kind == "gpu":
        return whole()
    if kind in ALIGNED:
        return ALIGNED[kind]
    return mig(kind)


FAMILIES = ("whole", "vgpu", "mig-1g", "mix")
# Claims per node and family: within what 8 H100s hold (4 whole GPUs; 20 slices of 10Gi/20 %, five per
# GPU; 20 1g.10gb).
PER_NODE = {"whole": 4, "vgpu": 20, "mig-1g": 20, "mix": 10}


def family_wants(family: str, count: int, *, seed: int) -> list[Want]:
    if family == "whole":
        return [whole()] * count
    if family == "vgpu":
        return [vgpu(10, 20)] * count
    if family == "mig-1g":
        return [mig("1g.10gb")] * count
    if family == "mix":
        rng = random.Random(seed)
        return [random_want(rng) for _ in range(count)]
    raise ValueError(f"unknown family {family!r}; use one of {', '.join(FAMILIES)}")
