"""The one place that defines Tessera's names, each formatter with its parser.

Device names, counter names, attribute names, DeviceClass names and CDI names are all spelled here and
nowhere else; the files and variables the interception library finds its claims by are in
dra_driver/libtessera/names.py.
"""

from __future__ import annotations

import hashlib
import re
from typing import NewType

from dra_driver.vocabulary.errors import InvalidNameError
from dra_driver.vocabulary.excerpt import excerpt

# A Kubernetes UID (the API server makes them UUIDs); nothing that could step out of a directory.
_CLAIM_UID_RE = re.compile(r"[0-9A-Za-z][0-9A-Za-z-]{0,127}")


class ClaimUID(str):
    """A claim UID that has been checked, so it can name files and directories (CDI spec, claim dir).

    Every construction validates: a UID from the kubelet, the API, a checkpoint or a file name that could
    reach outside its directory (`../x`, `a/b`, an empty string) raises InvalidNameError.
    """

    __slots__ = ()

    def __new__(cls, value: str) -> ClaimUID:
        if type(value) is cls:
            return value
        if not isinstance(value, str) or not _CLAIM_UID_RE.fullmatch(value):
            raise InvalidNameError(
                f"claim uid {excerpt(value)} is not a Kubernetes UID "
                "(1-128 letters, digits and '-', starting with a letter or digit)"
            )
        return super().__new__(cls, value)


GpuUUID = NewType("GpuUUID", str)
DeviceName = NewType("DeviceName", str)

DRIVER_NAME = "gpu.tessera.dev"
ATTRIBUTE_DOMAIN = DRIVER_NAME
PCI_BUS_ID_ATTRIBUTE = "resource.kubernetes.io/pciBusID"
# KEP-4381's and KEP-6072's standard attributes: every driver (GPUs, NICs, NVMe) that publishes them lets one
# `matchAttribute` constraint align devices across drivers (docs/topology.md).
PCIE_ROOT_ATTRIBUTE = "resource.kubernetes.io/pcieRoot"
NUMA_NODE_ATTRIBUTE = "resource.kubernetes.io/numaNode"
# The PCIe root complex as the upstream helper names it: the first directory under /sys/devices.
_PCIE_ROOT_RE = re.compile(r"pci[0-9a-f]{4}:[0-9a-f]{2}")


def check_pcie_root(value: str, where: str = "pcieRoot") -> str:
    """`pci0000:15`: a PCIe root complex as `resource.kubernetes.io/pcieRoot` spells it: pci<domain>:<bus>."""
    if not isinstance(value, str) or not _PCIE_ROOT_RE.fullmatch(value):
        raise InvalidNameError(f"{where}: {excerpt(value)} is not a PCIe root complex like pci0000:15")
    return value


# Opaque configuration API (resource.tessera.dev/v1).
CONFIG_GROUP = "resource.tessera.dev"
CONFIG_API_VERSION = f"{CONFIG_GROUP}/v1"

# CDI: one transient spec per claim.
CDI_VENDOR = f"k8s.{DRIVER_NAME}"
CDI_CLASS = "claim"
CDI_KIND = f"{CDI_VENDOR}/{CDI_CLASS}"


# A device family's name (`gpu`, `vgpu`, `mig`, ...): the value of the `type` attribute and the first label of
# its DeviceClass. Families are defined in dra_driver/core/families/, one module each.
Family = NewType("Family", str)


CLASS_DOMAIN = "tessera.dev"


def device_class_name(family: Family) -> str:
    """`gpu.tessera.dev`, `vgpu.tessera.dev`, `mig.tessera.dev`, ..."""
    return f"{family}.{CLASS_DOMAIN}"


def class_label(profile: str) -> str:
    """`1g.10gb+me` → `1g.10gb-me`: a profile as it is spelled in DeviceClass names and label values."""
    return profile.replace("+", "-")


def profile_class_name(family: Family, profile: str) -> str:
    """`mig-1g.10gb-me.gpu.tessera.dev`: the DeviceClass of one of a family's profiles."""
    return f"{family}-{class_label(profile)}.{DRIVER_NAME}"


# Attribute and capacity names (unqualified; qualified with ATTRIBUTE_DOMAIN when published).
class Attr:
    TYPE = "type"
    UUID = "uuid"
    PARENT_UUID = "parentUUID"
    PRODUCT_NAME = "productName"
    BRAND = "brand"
    ARCHITECTURE = "architecture"
    CUDA_COMPUTE_CAPABILITY = "cudaComputeCapability"
    DRIVER_VERSION = "driverVersion"
    CUDA_DRIVER_VERSION = "cudaDriverVersion"
    PROFILE = "profile"
    INDEX = "index"
    MIG_START = "migPlacementStart"
    MIG_STATIC = "migStatic"
    # Whole GPUs that reach each other over NVLink share one value (docs/topology.md).
    NVLINK_DOMAIN = "nvlinkDomain"
    # The GPU fabric (NVSwitch/IMEX systems): NVML's nvmlGpuFabricInfo clusterUuid and cliqueId.
    FABRIC_CLUSTER_UUID = "fabricClusterUUID"
    FABRIC_CLIQUE_ID = "fabricCliqueID"


class Cap:
    MEMORY = "memory"
    MULTIPROCESSORS = "multiprocessors"
    CORES = "cores"
    SHARES = "shares"
    VIRTUAL_MEMORY = "virtualMemory"  # a vgpu device's host-backed memory (memoryOversubscription > 1)


def qualified(name: str) -> str:
    return f"{ATTRIBUTE_DOMAIN}/{name}"


# ---- device names ----------------------------------------------------------------------------------
# Every device is `gpu-<index>` followed by what its family adds (`-vgpu`, `-mig-1g10gb-0`, nothing for a
# whole GPU); each family formats and parses its own part (dra_driver/core/families).

_DEVICE_RE = re.compile(r"^gpu-(0|[1-9]\d{0,3})(?:-([a-z0-9][a-z0-9-]*))?$")


def gpu_device_name(index: int, *parts: str) -> DeviceName:
    """`gpu-<index>`, and `-`-joined parts a family adds: gpu_device_name(3, "vgpu") → `gpu-3-vgpu`."""
    return DeviceName("-".join(("gpu", str(index), *parts)))


def split_device_name(name: str) -> tuple[int, str]:
    """`gpu-3-vgpu` → (3, "vgpu"); `gpu-0` → (0, "")."""
    m = _DEVICE_RE.match(name) if isinstance(name, str) else None
    if m is None:
        raise InvalidNameError(f"device name {excerpt(name)} is not of the form gpu-<index>[-<family part>]")
    return int(m.group(1)), m.group(2) or ""


# ---- counters -----------------------------------------------------------------------------------


def counter_set_name(index: int) -> str:
    return f"gpu-{index}-counters"


def memory_slice_counter(k: int) -> str:
    return f"memory-slice-{k}"


class Counter:
    MULTIPROCESSORS = "multiprocessors"
    COPY_ENGINES = "copy-engines"
    DECODERS = "decoders"
    ENCODERS = "encoders"
    JPEG_ENGINES = "jpeg-engines"
    OFA_ENGINES = "ofa-engines"
    MEMORY = "memory"


# ---- CDI ----------------------------------------------------------------------------------------


def cdi_device_name(claim_uid: ClaimUID, device: str, share_id: str | None = None) -> str:
    base = f"{claim_uid}-{device}"
    return f"{base}-{share_id}" if share_id else base


def cdi_qualified_name(name: str) -> str:
    return f"{CDI_KIND}={name}"


def parse_cdi_qualified_name(qualified_name: str) -> tuple[str, str, str]:
    """`vendor/class=name` → (vendor, class, name)."""
    kind, sep, name = qualified_name.partition("=")
    vendor, slash, klass = kind.partition("/")
    if not sep or not slash or not vendor or not klass or not name:
        raise InvalidNameError(f"CDI device {excerpt(qualified_name)} is not of the form vendor/class=name")
    return vendor, klass, name


_CDI_SPEC_PREFIX = f"{CDI_VENDOR}-{CDI_CLASS}_"


def cdi_spec_file_name(claim_uid: ClaimUID) -> str:
    return f"{_CDI_SPEC_PREFIX}{claim_uid}.json"


def cdi_spec_temp_prefix() -> str:
    """How the temp files of our spec writes begin (`dra_driver.io.files.temp_name` of a spec file)."""
    return f".{_CDI_SPEC_PREFIX}"


def parse_cdi_spec_file_name(file_name: str) -> ClaimUID | None:
    """The claim UID of one of our spec files, or None for any other file."""
    prefix, suffix = _CDI_SPEC_PREFIX, ".json"
    if not file_name.startswith(prefix) or not file_name.endswith(suffix):
        return None
    try:
        return ClaimUID(file_name[len(prefix) : -len(suffix)])
    except InvalidNameError:
        return None


# ---- kubelet plugin sockets ---------------------------------------------------------------------


def registration_socket_name(pod_uid: str | None = None) -> str:
    return f"{DRIVER_NAME}-{pod_uid}-reg.sock" if pod_uid else f"{DRIVER_NAME}-reg.sock"


def dra_socket_name(pod_uid: str | None = None) -> str:
    return f"dra-{pod_uid}.sock" if pod_uid else "dra.sock"


def is_registration_socket_name(name: str) -> bool:
    """Whether `name` is one of our registration sockets' names (any pod UID)."""
    return name.startswith(f"{DRIVER_NAME}-") and name.endswith("-reg.sock")


def is_dra_socket_name(name: str) -> bool:
    """Whether `name` is one of our DRA sockets' names (any pod UID), in our plugin directory."""
    return name == "dra.sock" or (name.startswith("dra-") and name.endswith(".sock"))


_READY_FILE = ".ready"


def ready_file_name(pod_uid: str | None = None) -> str:
    """The file a plugin instance keeps in the plugin directory while it is ready (its readinessProbe's)."""
    return f"{_READY_FILE}-{pod_uid}" if pod_uid else _READY_FILE


def ready_file_owner(name: str) -> str | None:
    """The pod UID whose ready file `name` is ("" for an instance without one), or None for any other name."""
    if name == _READY_FILE:
        return ""
    prefix = f"{_READY_FILE}-"
    return name[len(prefix) :] if name.startswith(prefix) and len(name) > len(prefix) else None


# ---- device health and metrics -------------------------------------------------------------------

UNHEALTHY_TAINT_KEY = f"{DRIVER_NAME}/unhealthy"  # the device taint of every device on an unhealthy GPU
CORDON_TAINT_KEY = f"{DRIVER_NAME}/cordoned"  # ... and on a GPU an administrator cordoned or drained
CORDON_ANNOTATION = f"{DRIVER_NAME}/cordon"  # the Node's record of them (dra_driver.core.cordon)
METRICS_PREFIX = "tessera_"  # every Prometheus metric the node daemon exports (kubelet_plugin.metric_names)
USAGE_DATA_KEY = "usage"  # status.devices[].data: the claim's recent usage, next to `limits`


# ---- simulated backend and node settings files (versioned on-disk formats) ----------------------

SIM_API_VERSION = "sim.tessera.dev/v1"
SIM_NODE_KIND = "SimulatedNode"
SIM_STATE_KIND = "SimulatedGpuState"
NODE_SETTINGS_KIND = "NodeSettings"  # apiVersion CONFIG_API_VERSION


def resource_slice_name(node_name: str, k: int) -> str:
    """The k-th slice of a node's pool: `<node>-gpu.tessera.dev-<k>` (a DNS subdomain, ≤ 253 characters;
    a very long node name is cut and made unique again with a hash)."""
    suffix = f"-{DRIVER_NAME}-{k}"
    if len(node_name) + len(suffix) > 253:
        digest = hashlib.sha256(node_name.encode()).hexdigest()[:10]
        node_name = f"{node_name[: 253 - len(suffix) - 11].rstrip('.-')}-{digest}"
    return f"{node_name}{suffix}"


# ---- what a claim's container is told about its GPUs (the interception library's own names are in
# dra_driver/libtessera/names.py) ------------------------------------------------------------------

CUDA_VISIBLE_DEVICES_ENV = "CUDA_VISIBLE_DEVICES"
# Tells the NVIDIA container toolkit, where it is the runtime, to add no GPU of its own to a container.
NVIDIA_VISIBLE_DEVICES_VOID = "NVIDIA_VISIBLE_DEVICES=void"


# Where the NVIDIA kernel driver's /proc files are (`devices`, `driver/nvidia/capabilities/...`): /proc,
# unless the host's /proc is mounted elsewhere or a fake driver keeps them (the fake libnvidia-ml's
# FAKE_NVML_PROC).
DRIVER_PROC_ROOT_ENV = "TESSERA_DRIVER_PROC_ROOT"
DEFAULT_DRIVER_PROC_ROOT = "/proc"
# Where the NVML backend reads the PCI topology (the standard attributes' sysfs: bus/pci/devices, node/...).
SYSFS_ROOT_ENV = "TESSERA_SYSFS_ROOT"
DEFAULT_SYSFS_ROOT = "/sys"
