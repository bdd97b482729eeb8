"""A second, tiny DRA driver for the topology scenarios: NICs of one node published as a ResourceSlice of
their own (another driver's pool), with the standard attributes `resource.kubernetes.io/pcieRoot` and
`numaNode` a NIC driver (DraNet, SR-IOV) publishes, and a DeviceClass that selects them. Nothing prepares
them: the scheduler and `tessera explain` only read the slices."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dra_driver.vocabulary.names import NUMA_NODE_ATTRIBUTE, PCIE_ROOT_ATTRIBUTE

Json = dict[str, Any]
DRIVER = "nic.topology.test"
CLASS = DRIVER


@dataclass(frozen=True, slots=True)
class Nic:
    name: str
    pcie_root: str
    numa_node: int


# The NICs beside e2e/nodes/h100x8.yaml's GPUs: one under each of the first two root complexes, two under
# the third (GPUs 4 and 5), one under the last. Only pci0000:55 can give 2 GPUs + 2 NICs under one root.
HGX_NICS = (
    Nic("nic-0", "pci0000:15", 0),
    Nic("nic-1", "pci0000:35", 0),
    Nic("nic-2", "pci0000:55", 1),
    Nic("nic-3", "pci0000:55", 1),
    Nic("nic-4", "pci0000:75", 1),
)


def nic_slice(node: str, nics: Sequence[Nic]) -> Json:
    """The driver's one slice on `node`: a pool of its own, named after the node as Tessera's is."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceSlice",
        "metadata": {"name": f"{node}-{DRIVER}"},
        "spec": {
            "driver": DRIVER,
            "nodeName": node,
            "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
            "devices": [
                {
                    "name": n.name,
                    "attributes": {
                        PCIE_ROOT_ATTRIBUTE: {"string": n.pcie_root},
                        NUMA_NODE_ATTRIBUTE: {"int": n.numa_node},
                    },
                }
                for n in nics
            ],
        },
    }


def nic_class() -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": CLASS},
        "spec": {"selectors": [{"cel": {"expression": f'device.driver == "{DRIVER}"'}}]},
    }


def aligned_claim(
    name: str, namespace: str, *, gpus: int, nics: int, attribute: str = PCIE_ROOT_ATTRIBUTE
) -> Json:
    """`gpus` whole GPUs and `nics` NICs whose `attribute` is one value across both drivers."""
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "gpus", "exactly": {"deviceClassName": "gpu.tessera.dev", "count": gpus}},
                    {"name": "nics", "exactly": {"deviceClassName": CLASS, "count": nics}},
                ],
                "constraints": [{"requests": ["gpus", "nics"], "matchAttribute": attribute}],
            }
        },
    }
