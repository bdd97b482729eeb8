"""A GPU's PCIe link as NVML tells it: its throughput each way over NVML's 20 ms window and its current
generation and width (what `dra_driver.core.paging` weighs). Raises `pynvml.NVMLError`; the backend
translates it (NotSupported on vGPU guests, MIG devices and some boards)."""

from __future__ import annotations

from typing import Any

import pynvml

from dra_driver.core.paging import LinkTraffic

KB = 1000  # NVML counts the throughput in KB/s


def link_traffic(h: Any) -> LinkTraffic:
    """One reading of the link of the GPU whose handle is `h` (each throughput call counts for 20 ms)."""
    tx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_TX_BYTES)
    rx = pynvml.nvmlDeviceGetPcieThroughput(h, pynvml.NVML_PCIE_UTIL_RX_BYTES)
    return LinkTraffic(
        tx_bytes_per_s=int(tx) * KB,
        rx_bytes_per_s=int(rx) * KB,
        # the current link, not the maximum: a link trained down (x8 in an x16 slot) carries what it carries
        generation=int(pynvml.nvmlDeviceGetCurrPcieLinkGeneration(h)),
        width=int(pynvml.nvmlDeviceGetCurrPcieLinkWidth(h)),
    )
