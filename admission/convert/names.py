"""The foreign names the conversion reads (HAMi's and Volcano's) and the names it writes (pure).

HAMi (`nvidia.com/*`, `hami.io/*`) and Volcano's vGPU device plugin (`volcano.sh/*`, a HAMi-core fork)
spell the same four per-container quantities differently; a `Dialect` maps each spelling to its meaning, so
the parser reads both the same way. Everything the webhook's matchConditions select on comes from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum


class Quantity(StrEnum):
    """What a foreign extended resource means, per container."""

    COUNT = "count"  # how many GPUs (HAMi: vGPUs, each on a different physical GPU)
    MEMORY = "memory"  # MiB of device memory per GPU
    MEMORY_PERCENT = "memory-percent"  # % of each GPU's memory
    CORES = "cores"  # % of each GPU's SMs
    PRIORITY = "priority"  # HAMi task priority: 0 high, 1 normal


@dataclass(frozen=True, slots=True)
class Dialect:
    """One project's spelling: resource names by meaning and the pod annotations it reads."""

    name: str
    resources: tuple[tuple[Quantity, str], ...]
    mode_annotation: str  # `mig` / `mps` / `hami-core`
    modes: tuple[str, ...]

    def resource(self, what: Quantity) -> str | None:
        return next((name for q, name in self.resources if q == what), None)

    def meaning(self, resource: str) -> Quantity | None:
        return next((q for q, name in self.resources if name == resource), None)

    @property
    def resource_names(self) -> tuple[str, ...]:
        return tuple(name for _, name in self.resources)


HAMI = Dialect(
    name="hami",
    resources=(
        (Quantity.COUNT, "nvidia.com/gpu"),
        (Quantity.MEMORY, "nvidia.com/gpumem"),
        (Quantity.MEMORY_PERCENT, "nvidia.com/gpumem-percentage"),
        (Quantity.CORES, "nvidia.com/gpucores"),
        (Quantity.PRIORITY, "nvidia.com/priority"),
    ),
    mode_annotation="nvidia.com/vgpu-mode",
    modes=("hami-core", "mig", "mps"),
)

VOLCANO = Dialect(
    name="volcano",
    resources=(
        (Quantity.COUNT, "volcano.sh/vgpu-number"),
        (Quantity.MEMORY, "volcano.sh/vgpu-memory"),
        (Quantity.MEMORY_PERCENT, "volcano.sh/vgpu-memory-percentage"),
        (Quantity.CORES, "volcano.sh/vgpu-cores"),
    ),
    mode_annotation="volcano.sh/vgpu-mode",
    modes=("hami-core", "mig"),
)

DIALECTS: tuple[Dialect, ...] = (HAMI, VOLCANO)


def all_resource_names() -> tuple[str, ...]:
    """Every extended resource name the conversion takes over, in a fixed order."""
    return tuple(name for d in DIALECTS for name in d.resource_names)


def dialect_of(resource: str) -> Dialect | None:
    return next((d for d in DIALECTS if resource in d.resource_names), None)


# HAMi's pod annotations for which GPUs may be used (comma-separated lists); Volcano reads none of them.
USE_GPU_TYPE = "nvidia.com/use-gputype"
NOUSE_GPU_TYPE = "nvidia.com/nouse-gputype"
USE_GPU_UUID = "nvidia.com/use-gpuuuid"
NOUSE_GPU_UUID = "nvidia.com/nouse-gpuuuid"
# Scoring policies: recorded, not honoured by the upstream scheduler's first-fit device allocation.
GPU_SCHEDULER_POLICY = "hami.io/gpu-scheduler-policy"
NODE_SCHEDULER_POLICY = "hami.io/node-scheduler-policy"
SCHEDULER_POLICIES = ("binpack", "spread")

# HAMi-core's container variables that a Tessera opaque config says instead.
SM_POLICY_ENV = "GPU_CORE_UTILIZATION_POLICY"
LOG_LEVEL_ENV = "LIBCUDA_LOG_LEVEL"

# What the conversion writes.
CONVERTED_ANNOTATION = "admission.tessera.dev/converted"
# The webhook's patch labels a converted Pod so that its template reconciler can watch just those Pods.
CONVERTED_LABEL = ("admission.tessera.dev/converted", "true")
# Every template the conversion writes (`tessera convert` for GitOps, or the webhook) carries MANAGED_BY; the
# webhook's reconciler adds MADE_BY to those it creates, and deletes only those (GitOps templates never).
MANAGED_BY = ("app.kubernetes.io/managed-by", "tessera-admission")
MADE_BY = ("admission.tessera.dev/made-by", "webhook")
CLAIM_PREFIX = "tessera-gpu"
REQUEST_NAME = "gpu"
