"""GPU discovery backends: NVML through pynvml, and a simulated node described in YAML."""

from __future__ import annotations

from pathlib import Path

from dra_driver.backends.base import GpuBackend


def open_backend(
    *,
    simulate: Path | None,
    state_file: Path | None,
    watch_health: bool = False,
    nvml_library: Path | None = None,
) -> GpuBackend:
    """The simulated node in `simulate` (its state persisted in `state_file` when given), else NVML
    (`watch_health`: with a thread watching NVML's XID and ECC events, for the node daemon; `nvml_library`:
    libnvidia-ml.so.1 by path, from a driver root, instead of the loader's search)."""
    if simulate is not None:
        from dra_driver.backends.simulated import SimulatedBackend  # noqa: PLC0415 - keeps pynvml optional

        return SimulatedBackend.from_file(node_file=simulate, state_file=state_file)
    from dra_driver.backends.nvml import NvmlBackend  # noqa: PLC0415 - only hosts with a GPU import pynvml

    return NvmlBackend.open(watch_health=watch_health, library=nvml_library)


__all__ = ["GpuBackend", "open_backend"]
