"""What Tessera needs from the cluster, by family: the Kubernetes feature gates, on which components, and
from which release they are on by default. One place, read by the publisher's degraded warning, by
`tessera explain`, and checked against docs/install.md by a test.
"""

from __future__ import annotations

import re
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

# List-valued attributes (KEP-5491), alpha and off by default in 1.36 and 1.37: the list form of
# resource.kubernetes.io/numaNode (NodeSettings numaNodeForm: list) needs it on every component; an API server
# without it drops the list and refuses the slice, so the scalar form is the default, and the publisher falls
# back to it where the list is refused (numa_list_advice, docs/topology.md).
LIST_TYPE_ATTRIBUTES: Final = "DRAListTypeAttributes"


def numa_list_advice() -> str:
    """What a node with `numaNodeForm: list` on an API server without DRAListTypeAttributes is told."""
    return (
        f"numaNodeForm: list needs the {LIST_TYPE_ATTRIBUTES} feature gate on kube-apiserver, kube-scheduler "
        "and kube-controller-manager (an API server without it drops the list and refuses the slice): "
        "resource.kubernetes.io/numaNode is published as an int (the GPU's own NUMA node) meanwhile; turn "
        "the gate on and restart the plugin, or set numaNodeForm: scalar: see docs/topology.md"
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


# Families whose device is multi-allocatable: the counters it consumes are taken once, by its first claim, and
# stay taken while any claim holds a share.
SHARED_FAMILIES: Final = ("vgpu", "mps")
# The allocator counts the counters held by shared allocations from this release on
# (kubernetes/kubernetes#139040, in k8s.io/dynamic-resource-allocation v0.36.2): every 1.34 and 1.35
# release, 1.36.0 and 1.36.1 ignore them, and so does every scheduler that vendors one of those allocators
# (Volcano main at ed72c7c: v0.36.1), so it would hand out a whole GPU, a MIG instance or the other shared
# family on a GPU a slice is on.
SHARED_COUNTERS_COUNTED_FROM: Final = (1, 36, 2)
_VERSION_RE: Final = re.compile(r"v?(\d+)\.(\d+)(?:\.(\d+))?")


def release_version(git_version: str) -> tuple[int, int, int] | None:
    """`v1.35.4` (or `v1.35.4-gke.1`) → (1, 35, 4); `1.36` → (1, 36, 0); None for anything else."""
    m = _VERSION_RE.match(git_version.strip())
    return (int(m.group(1)), int(m.group(2)), int(m.group(3) or 0)) if m else None


def enforceable_families(families: frozenset[str], scheduler: tuple[int, int, int]) -> frozenset[str]:
    """The families a node may publish where a scheduler with the allocator of release `scheduler` can keep
    them apart. On one that ignores counters held by shared devices, a shared family is published only as the
    node's one family: beside whole GPUs or MIG the shared families go; of two shared families alone, vgpu
    stays."""
    if scheduler >= SHARED_COUNTERS_COUNTED_FROM:
        return families
    shared = sorted(families & set(SHARED_FAMILIES), key=SHARED_FAMILIES.index)
    if len(families) == 1 or not shared:
        return families
    exclusive = families - set(SHARED_FAMILIES)
    return frozenset(exclusive) if exclusive else frozenset(shared[:1])


def unenforced_message(scheduler: str, withheld: frozenset[str]) -> str:
    """`scheduler` names the one that cannot keep them apart: `kube-scheduler v1.35.4`, or the release a
    NodeSettings `schedulerVersion` gives."""
    names = ", ".join(sorted(withheld))
    return (
        f"not publishing {names}: {scheduler} ignores the counters that shared devices hold "
        "(kubernetes/kubernetes#139040, fixed in 1.36.2), so it would hand out a whole GPU, a MIG instance "
        "or another shared family on a GPU a slice is on; upgrade to Kubernetes 1.36.2 or newer (a scheduler "
        "built with k8s.io/dynamic-resource-allocation v0.36.2 or newer), or give the shared family a node "
        "group of its own (nodeGroups[].families: [vgpu] or [mps]): see docs/install.md"
    )
