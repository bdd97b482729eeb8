"""The simulated node file (`sim.tessera.dev/v1`, kind `SimulatedNode`): which GPUs a fake node has.

apiVersion: sim.tessera.dev/v1
kind: SimulatedNode
nodeName: node-a            # optional; seeds the GPU UUIDs so two nodes differ
seed: node-a                # optional; overrides the UUID seed
driverVersion: "550.54.15"  # optional
cudaDriverVersion: "12.4"   # optional
hostMemoryGiB: 2048         # optional, default 2048 (a DGX H100's); the host's memory (its MemTotal),
                            #   what backs memoryOversubscription (the fake NVML's /proc/meminfo says it too)
gpus:
- product: H100-80GB-SXM    # node-file key or NVML product name (dra_driver.core.profiles)
  count: 8                  # optional, default 1
  migEnabled: false         # optional; only for MIG-capable products
  uuid: GPU-...             # optional; only with count 1
  healthy: true             # optional
  instances:                # optional; MIG instances an administrator created
  - {profile: 3g.40gb, start: 0}
  numaNode: 0               # optional; the NUMA node sysfs reports (none: no NUMA affinity)
  pcieRoot: pci0000:15      # optional; the PCIe root complex above these GPUs (none: not known)
  nvlink: switch            # optional; switch: links end at the board's NVSwitches; bridge: the GPUs of
                            #   this entry are bridged to each other (count 2: a pair)
  fabric:                   # optional, with nvlink: switch; the GPU fabric (NVSwitch/IMEX systems)
    clusterUuid: 2b6d5c3a-...
    cliqueId: 1
"""

from __future__ import annotations

import uuid as uuidlib
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from dra_driver.backends.decoding import (
    check_fields,
    check_header,
    expect_list,
    expect_mapping,
    get_typed,
)
from dra_driver.core.profiles import GpuProduct, product
from dra_driver.io.yaml_files import read_yaml_document
from dra_driver.vocabulary.errors import ConfigError, InvalidNameError
from dra_driver.vocabulary.inventory import NO_NVLINK, Fabric, NvLinks
from dra_driver.vocabulary.names import SIM_API_VERSION, SIM_NODE_KIND, GpuUUID, check_pcie_root

DEFAULT_DRIVER_VERSION = "550.54.15"
DEFAULT_CUDA_DRIVER_VERSION = "12.4"
# The fields of each level (the fake libnvidia-ml reads the same files; a test compares the two readers).
NODE_REQUIRED = frozenset({"apiVersion", "kind", "gpus"})
NODE_OPTIONAL = frozenset({"nodeName", "seed", "driverVersion", "cudaDriverVersion", "hostMemoryGiB"})
DEFAULT_HOST_MEMORY_GIB = 2048
MAX_HOST_MEMORY_GIB = 1 << 20  # 1 PiB: beyond any host; the fake NVML's reader has the same bound
GPU_REQUIRED = frozenset({"product"})
GPU_OPTIONAL = frozenset(
    {"count", "migEnabled", "uuid", "healthy", "instances", "numaNode", "pcieRoot", "nvlink", "fabric"}
)
INSTANCE_REQUIRED = frozenset({"profile", "start"})
FABRIC_REQUIRED = frozenset({"clusterUuid", "cliqueId"})
NVLINK_KINDS = ("switch", "bridge")
# Fixed namespace so the same seed always yields the same GPU UUIDs.
_UUID_NAMESPACE = uuidlib.UUID("5f0c1d2e-7a43-4c59-9e1b-3c7d2a9b8e60")


@dataclass(frozen=True, slots=True)
class AdminInstance:
    profile_id: int
    start: int


@dataclass(frozen=True, slots=True)
class SimGpu:
    index: int
    uuid: GpuUUID
    product: GpuProduct
    pci_bus_id: str
    mig_enabled: bool
    healthy: bool
    admin_instances: tuple[AdminInstance, ...]
    pcie_root: str | None = None
    numa_node: int | None = None
    nvlinks: NvLinks = NO_NVLINK
    fabric: Fabric | None = None


@dataclass(frozen=True, slots=True)
class SimulatedNode:
    node_name: str
    seed: str
    driver_version: str
    cuda_driver_version: str
    gpus: tuple[SimGpu, ...]
    host_memory_gib: int = DEFAULT_HOST_MEMORY_GIB

    def gpu(self, uuid: str) -> SimGpu | None:
        return next((g for g in self.gpus if g.uuid == uuid), None)


def gpu_uuid(seed: str, index: int) -> GpuUUID:
    return GpuUUID(f"GPU-{uuidlib.uuid5(_UUID_NAMESPACE, f'{seed}/gpu/{index}')}")


def admin_mig_uuid(seed: str, gpu: GpuUUID, start: int) -> str:
    """Instances from the node file get stable UUIDs so a restart without a state file sees the same ones."""
    return f"MIG-{uuidlib.uuid5(_UUID_NAMESPACE, f'{seed}/{gpu}/mig/{start}')}"


def _pci_bus_id(index: int) -> str:
    return f"00000000:{0x18 + 0x10 * index:02X}:00.0"


def _decode_instance(raw: object, where: str, prod: GpuProduct) -> AdminInstance:
    data = expect_mapping(raw, where)
    check_fields(data, where, required=set(INSTANCE_REQUIRED), optional=set())
    profile_ref = data["profile"]
    if isinstance(profile_ref, bool) or not isinstance(profile_ref, str | int):
        raise ConfigError(f"{where}.profile: expected a profile name (e.g. 1g.10gb) or a profile id")
    prof = (
        prof_by_name
        if isinstance(profile_ref, str) and (prof_by_name := prod.profile_by_name(profile_ref))
        else (prod.profile_by_id(profile_ref) if isinstance(profile_ref, int) else None)
    )
    if prof is None:
        known = ", ".join(p.name for p in prod.mig_profiles)
        raise ConfigError(f"{where}.profile: {profile_ref!r} is not a MIG profile of {prod.key} ({known})")
    start = get_typed(data, "start", int, where, -1)
    if start not in prof.placement_starts:
        raise ConfigError(
            f"{where}.start: {start} is not a placement of {prof.name}; "
            f"valid starts: {list(prof.placement_starts)}"
        )
    return AdminInstance(profile_id=prof.profile_id, start=start)


def _check_admin_layout(instances: tuple[AdminInstance, ...], prod: GpuProduct, where: str) -> None:
    used: set[int] = set()
    for inst in instances:
        prof = prod.profile_by_id(inst.profile_id)
        assert prof is not None  # decoded against this product
        slices = set(range(inst.start, inst.start + prof.memory_slices))
        if used & slices:
            raise ConfigError(f"{where}: instance {prof.name} at {inst.start} overlaps another instance")
        used |= slices
        count = sum(1 for i in instances if i.profile_id == inst.profile_id)
        if count > prof.max_instances:
            raise ConfigError(f"{where}: more than {prof.max_instances} instances of {prof.name}")


@dataclass(frozen=True, slots=True)
class _Topology:
    """An entry's topology fields, the same for each of its `count` GPUs (but bridge peers)."""

    pcie_root: str | None
    numa_node: int | None
    nvlink: str | None
    fabric: Fabric | None


def _decode_fabric(raw: object, where: str) -> Fabric:
    data = expect_mapping(raw, where)
    check_fields(data, where, required=set(FABRIC_REQUIRED), optional=set())
    cluster = get_typed(data, "clusterUuid", str, where, "")
    try:
        canonical = str(uuidlib.UUID(cluster))
    except ValueError:
        canonical = ""
    if canonical != cluster:  # one spelling, so that the fake's reader and this one agree
        raise ConfigError(f"{where}.clusterUuid: {cluster!r} is not a UUID (lowercase, with dashes)")
    clique = get_typed(data, "cliqueId", int, where, -1)
    if not 0 <= clique < 2**32:
        raise ConfigError(f"{where}.cliqueId: expected 0..4294967295, got {clique}")
    return Fabric(cluster_uuid=cluster, clique_id=clique)


def _decode_topology(entry: Mapping[str, object], where: str, count: int) -> _Topology:
    root = get_typed(entry, "pcieRoot", str, where, "") if "pcieRoot" in entry else None
    if root is not None:
        try:
            check_pcie_root(root, f"{where}.pcieRoot")
        except InvalidNameError as e:
            raise ConfigError(str(e)) from e
    numa = get_typed(entry, "numaNode", int, where, -1)
    if "numaNode" in entry and not 0 <= numa < 1024:
        raise ConfigError(f"{where}.numaNode: expected 0..1023 (leave it out for no NUMA node), got {numa}")
    nvlink = get_typed(entry, "nvlink", str, where, "")
    if nvlink and nvlink not in NVLINK_KINDS:
        raise ConfigError(f"{where}.nvlink: {nvlink!r} is not one of {', '.join(NVLINK_KINDS)}")
    if nvlink == "bridge" and count < 2:
        raise ConfigError(f"{where}.nvlink: bridge joins the GPUs of this entry; give it count 2 or more")
    fabric = _decode_fabric(entry["fabric"], f"{where}.fabric") if "fabric" in entry else None
    if fabric is not None and nvlink != "switch":
        raise ConfigError(f"{where}.fabric: a GPU fabric needs nvlink: switch")
    return _Topology(root, numa if numa >= 0 else None, nvlink or None, fabric)


def _nvlinks(topology: _Topology, first: int, count: int, index: int) -> NvLinks:
    if topology.nvlink == "switch":
        return NvLinks(switch=True)
    if topology.nvlink == "bridge":
        return NvLinks(peers=tuple(i for i in range(first, first + count) if i != index))
    return NO_NVLINK


def decode_node(raw: object, *, default_name: str) -> SimulatedNode:
    data = expect_mapping(raw, "node file")
    check_fields(data, "", required=set(NODE_REQUIRED), optional=set(NODE_OPTIONAL))
    check_header(data, "", api_version=SIM_API_VERSION, kind=SIM_NODE_KIND)
    node_name = get_typed(data, "nodeName", str, "", default_name)
    seed = get_typed(data, "seed", str, "", node_name)
    driver_version = get_typed(data, "driverVersion", str, "", DEFAULT_DRIVER_VERSION)
    cuda_version = get_typed(data, "cudaDriverVersion", str, "", DEFAULT_CUDA_DRIVER_VERSION)
    host_memory = get_typed(data, "hostMemoryGiB", int, "", DEFAULT_HOST_MEMORY_GIB)
    if not 1 <= host_memory <= MAX_HOST_MEMORY_GIB:
        raise ConfigError(f"hostMemoryGiB: expected 1..{MAX_HOST_MEMORY_GIB} (GiB), got {host_memory}")
    gpus: list[SimGpu] = []
    seen_uuids: set[str] = set()
    for n, raw_entry in enumerate(expect_list(data["gpus"], "gpus")):
        where = f"gpus[{n}]"
        entry = expect_mapping(raw_entry, where)
        check_fields(entry, where, required=set(GPU_REQUIRED), optional=set(GPU_OPTIONAL))
        try:
            prod = product(get_typed(entry, "product", str, where, ""))
        except ConfigError as e:
            raise ConfigError(f"{where}.product: {e}") from e
        count = get_typed(entry, "count", int, where, 1)
        if count < 1:
            raise ConfigError(f"{where}.count: must be at least 1, got {count}")
        mig_enabled = get_typed(entry, "migEnabled", bool, where, False)
        if mig_enabled and not prod.mig_capable:
            raise ConfigError(f"{where}.migEnabled: {prod.key} cannot do MIG; remove the field")
        explicit_uuid = get_typed(entry, "uuid", str, where, "")
        if explicit_uuid and count != 1:
            raise ConfigError(f"{where}.uuid: only allowed with count 1 (list such GPUs one by one)")
        if explicit_uuid and not explicit_uuid.startswith("GPU-"):
            raise ConfigError(f"{where}.uuid: must start with 'GPU-', got {explicit_uuid!r}")
        healthy = get_typed(entry, "healthy", bool, where, True)
        raw_instances = expect_list(entry.get("instances", []), f"{where}.instances")
        if raw_instances and not mig_enabled:
            raise ConfigError(f"{where}.instances: MIG instances need migEnabled: true")
        instances = tuple(
            _decode_instance(r, f"{where}.instances[{k}]", prod) for k, r in enumerate(raw_instances)
        )
        _check_admin_layout(instances, prod, f"{where}.instances")
        topology = _decode_topology(entry, where, count)
        first = len(gpus)
        for _ in range(count):
            index = len(gpus)
            uuid = GpuUUID(explicit_uuid) if explicit_uuid else gpu_uuid(seed, index)
            if uuid in seen_uuids:
                raise ConfigError(f"{where}.uuid: {uuid} is used by two GPUs")
            seen_uuids.add(uuid)
            gpus.append(
                SimGpu(
                    index=index,
                    uuid=uuid,
                    product=prod,
                    pci_bus_id=_pci_bus_id(index),
                    mig_enabled=mig_enabled,
                    healthy=healthy,
                    admin_instances=instances,
                    pcie_root=topology.pcie_root,
                    numa_node=topology.numa_node,
                    nvlinks=_nvlinks(topology, first, count, index),
                    fabric=topology.fabric,
                )
            )
    if not gpus:
        raise ConfigError("gpus: list at least one GPU")
    return SimulatedNode(
        node_name=node_name,
        seed=seed,
        driver_version=driver_version,
        cuda_driver_version=cuda_version,
        gpus=tuple(gpus),
        host_memory_gib=host_memory,
    )


def load_node(path: Path) -> SimulatedNode:
    try:
        raw = read_yaml_document(path)
    except ConfigError as e:
        raise ConfigError(f"simulated node file {e}") from e
    try:
        return decode_node(raw, default_name=path.stem)
    except ConfigError as e:
        raise ConfigError(f"simulated node file {path}: {e}") from e
