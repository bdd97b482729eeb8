"""What Tessera needs from the cluster, by family: the Kubernetes feature gates, on which components, and
from which release they are on by default. One place, read by the publisher's degraded warning, by
`tessera explain`, and checked against docs/install.md by a test.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Final

PARTITIONABLE: Final = "DRAPartitionableDevices"
CONSUMABLE: Final = "DRAConsumableCapacity"
# Shared counters and multi-allocatable devices: without both the publisher falls back to whole GPUs.
SHARING_GATES: Final = (PARTITIONABLE, CONSUMABLE)
# Every component that reads or writes the gated fields must have the gate: the API server keeps them, the
# scheduler allocates with them, the controller manager copies claims from templates, the kubelet prepares.
COMPONENTS: Final = ("kube-apiserver", "kube-scheduler", "kube-controller-manager", "kubelet")


@dataclass(frozen=True, slots=True)
class Gate:
    name: str
    default_from: str  # the first minor release that has it on by default ("1.36")
    serves: str  # what Tessera uses it for


GATES: Final = (
    Gate(PARTITIONABLE, "1.36", "shared counters: MIG placements, and whole GPUs excluding slices of them"),
    Gate(CONSUMABLE, "1.36", "multi-allocatable vgpu and MPS devices with memory/cores capacity"),
    Gate("DRADeviceTaints", "1.36", "taints on an unhealthy GPU's devices (else they are withdrawn)"),
    Gate("DRAExtendedResource", "1.36", "`resources.limits: {gpu.tessera.dev/gpu: 1}` through a DeviceClass"),
    Gate("DRAResourceClaimDeviceStatus", "1.33", "limits and MIG UUIDs in the claim's status.devices"),
)

# family → the gates without which the family is not published (whole GPUs need none beyond DRA itself)
FAMILY_GATES: Final[dict[str, tuple[str, ...]]] = {
    "gpu": (),
    "vgpu": SHARING_GATES,
    "mps": SHARING_GATES,
    "mig": SHARING_GATES,  # MIG needs counters only, but the publisher falls back as a whole
}


def sharing_advice() -> str:
    """The sentence that tells an administrator what to switch on, and where."""
    gates = " and ".join(SHARING_GATES)
    return (
        f"vgpu, MPS and MIG devices need {gates} (on by default from Kubernetes 1.36; alpha before) on "
        f"{', '.join(COMPONENTS)}: see docs/install.md"
    )
