"""Where a PCI device sits, read from sysfs as k8s.io/dynamic-resource-allocation/deviceattribute reads it, so
Tessera's `resource.kubernetes.io/pcieRoot` and `numaNode` equal those a NIC driver publishes beside it:

- pcieRoot: `/sys/bus/pci/devices/<bus id>` is a link into `/sys/devices/pci<domain>:<bus>/…/<bus id>`; the
  first directory under `/sys/devices` is the root complex.
- numaNode: `/sys/bus/pci/devices/<bus id>/numa_node`; -1 (no NUMA affinity) leaves the attribute out. The
  list form adds the nodes at the nearest distance of `/sys/devices/system/node/node<N>/distance` (the ACPI
  SLIT) when that distance is below the kernel's REMOTE_DISTANCE, i.e. other nodes of the same socket.

The parsers are pure; `pci_place` reads the files and leaves out what it cannot read (a VM without NUMA, a
container without /sys): a GPU without these attributes is still a GPU.
"""

from __future__ import annotations

import os
import posixpath
from dataclasses import dataclass
from pathlib import Path

import structlog

from dra_driver.core.families.published import pci_bus_id
from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.names import check_pcie_root

log = structlog.get_logger(__name__)

REMOTE_DISTANCE = 20  # include/linux/topology.h: a SLIT distance from here on is another socket's


@dataclass(frozen=True, slots=True)
class PciPlace:
    pcie_root: str | None = None
    numa_node: int | None = None
    numa_near: tuple[int, ...] = ()


def pcie_root_of(link: str, link_dir: str, sysfs_root: str, bus_id: str) -> str | None:
    """The root complex in the target of the link `<sysfs_root>/bus/pci/devices/<bus_id>` (in `link_dir`);
    None when the target is not `<sysfs_root>/devices/pci…/…/<bus_id>`."""
    target = posixpath.normpath(link if posixpath.isabs(link) else posixpath.join(link_dir, link))
    devices = posixpath.join(posixpath.normpath(sysfs_root), "devices") + "/"
    if not target.startswith(devices) or posixpath.basename(target) != bus_id:
        return None
    root = target[len(devices) :].split("/", 1)[0]
    try:
        return check_pcie_root(root)
    except InvalidNameError:
        return None


def numa_node_of(text: str) -> int | None:
    """The content of a `numa_node` file: the node, or None for -1 (and for anything that is not a node)."""
    try:
        node = int(text.strip())
    except ValueError:
        return None
    return node if node >= 0 else None


def near_nodes(node: int, distance_line: str) -> tuple[int, ...]:
    """The other nodes at the smallest distance from `node` in its SLIT row, when it is a same-socket one."""
    try:
        distances = [int(d) for d in distance_line.split()]
    except ValueError:
        return ()
    others = [(d, n) for n, d in enumerate(distances) if n != node]
    if not others:
        return ()
    nearest = min(d for d, _ in others)
    if nearest >= REMOTE_DISTANCE:
        return ()
    return tuple(n for d, n in others if d == nearest)


def pci_place(sysfs_root: Path, nvml_bus_id: str) -> PciPlace:
    """Where the device with NVML bus id `nvml_bus_id` sits; what sysfs does not show is left None."""
    bus_id = pci_bus_id(nvml_bus_id)  # sysfs spells it as the standard attribute does: 0000:18:00.0
    link = sysfs_root / "bus" / "pci" / "devices" / bus_id
    try:
        root = pcie_root_of(os.readlink(link), str(link.parent), str(sysfs_root), bus_id)
    except OSError as e:
        log.warning("sysfs.no_pci_device", bus_id=bus_id, error=str(e))
        return PciPlace()
    try:
        node = numa_node_of((link / "numa_node").read_text(encoding="ascii"))
    except (OSError, UnicodeDecodeError):
        node = None
    near: tuple[int, ...] = ()
    if node is not None:
        try:
            distance = (sysfs_root / "devices" / "system" / "node" / f"node{node}" / "distance").read_text()
            near = near_nodes(node, distance)
        except (OSError, UnicodeDecodeError):
            near = ()
    return PciPlace(pcie_root=root, numa_node=node, numa_near=near)
