"""Where a GPU sits among the others, as NVML tells it: the ends of its NVLinks and the GPU fabric it joined
(NVSwitch/IMEX systems). Its place on PCI (root complex, NUMA node) comes from sysfs (`sysfs.py`)."""

from __future__ import annotations

import ctypes
import uuid as uuidlib
from typing import Any

import pynvml

from dra_driver.backends.nvml_calls import has_code, text
from dra_driver.core.families.published import pci_bus_id
from dra_driver.vocabulary.inventory import Fabric


def nvlink_ends(h: Any) -> tuple[bool, tuple[str, ...]]:
    """Whether any active NVLink of the GPU ends at an NVSwitch, and the bus ids of GPUs its links end at.
    On an HGX board every link ends at a switch, never at the peer GPU: only the remote device type tells
    (HAMi's scoring saw no NVLink on 8 x H100 until it asked, HAMi #2103)."""
    switch, peers = False, set()
    for link in range(pynvml.NVML_NVLINK_MAX_LINKS):
        try:
            if pynvml.nvmlDeviceGetNvLinkState(h, link) != pynvml.NVML_FEATURE_ENABLED:
                continue
            kind = pynvml.nvmlDeviceGetNvLinkRemoteDeviceType(h, link)
            if kind == pynvml.NVML_NVLINK_DEVICE_TYPE_SWITCH:
                switch = True
            elif kind == pynvml.NVML_NVLINK_DEVICE_TYPE_GPU:
                peers.add(pci_bus_id(text(pynvml.nvmlDeviceGetNvLinkRemotePciInfo(h, link).busId)))
        except pynvml.NVMLError as e:
            # past the GPU's last link (InvalidArgument), or no NVLink at all (NotSupported)
            if has_code(e, pynvml.NVML_ERROR_INVALID_ARGUMENT, pynvml.NVML_ERROR_NOT_SUPPORTED):
                break
            raise
    return switch, tuple(sorted(peers))


def fabric(h: Any) -> Fabric | None:
    """The GPU fabric the GPU has joined (NVSwitch/IMEX systems); None where there is none or not yet."""
    info = pynvml.c_nvmlGpuFabricInfo_v2_t()
    try:
        pynvml.nvmlDeviceGetGpuFabricInfoV(h, ctypes.byref(info))
    except pynvml.NVMLError as e:
        if has_code(e, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_FUNCTION_NOT_FOUND):
            return None
        raise
    if info.state != pynvml.NVML_GPU_FABRIC_STATE_COMPLETED or info.status != pynvml.NVML_SUCCESS:
        return None
    cluster = uuidlib.UUID(bytes=bytes(info.clusterUuid))
    return Fabric(cluster_uuid=str(cluster), clique_id=int(info.cliqueId))
