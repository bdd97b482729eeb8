"""Another GPU device plugin on this node: which of the Node's resources say so (pure).

NVIDIA's device plugin and HAMi's advertise `nvidia.com/gpu` (MIG strategy `mixed`:
`nvidia.com/mig-<profile>`), Volcano's vGPU plugin `volcano.sh/vgpu-number`. Each hands out the node's GPUs on
its own, so while one of them advertises a non-zero capacity, Tessera publishing the same GPUs would let
the kubelet give one GPU to two pods. The node plugin publishes nothing there unless an administrator says
the GPUs are split between them (`--gpus-split-with-device-plugin`: e.g. a device plugin restricted to other
GPUs by its own configuration).
"""

from __future__ import annotations

from collections.abc import Mapping

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.quantity import parse_quantity

FOREIGN_GPU_RESOURCES = ("nvidia.com/gpu", "volcano.sh/vgpu-number")
FOREIGN_GPU_PREFIXES = ("nvidia.com/mig-",)
SPLIT_FLAG = "--gpus-split-with-device-plugin"
REFUSED_REASON = "OtherGpuDevicePlugin"


def _positive(value: object) -> bool:
    try:
        return parse_quantity(str(value)).value > 0
    except ConfigError:  # not a quantity: not a count of GPUs
        return False


def foreign_gpu_resources(capacity: Mapping[str, object]) -> tuple[str, ...]:
    """The Node's extended resources (from `status.capacity`) another GPU device plugin advertises."""
    return tuple(
        sorted(
            name
            for name, value in capacity.items()
            if (name in FOREIGN_GPU_RESOURCES or name.startswith(FOREIGN_GPU_PREFIXES)) and _positive(value)
        )
    )


def refusal_message(node: str, found: tuple[str, ...]) -> str:
    listed = ", ".join(found)
    return (
        f"node {node} advertises {listed}: another GPU device plugin (NVIDIA's, HAMi's or Volcano's) "
        "hands out this node's GPUs, and publishing them too would let two pods get one GPU; Tessera "
        "publishes no device here. Remove that plugin from this node (docs/migration-from-hami.md), or, if "
        f"its GPUs and Tessera's are split by configuration, start the node plugin with {SPLIT_FLAG}"
    )
