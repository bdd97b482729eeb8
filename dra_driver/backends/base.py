"""The interface every GPU backend (NVML, simulated) implements."""

from __future__ import annotations

from typing import Protocol, runtime_checkable

from dra_driver.core.paging import LinkTraffic
from dra_driver.vocabulary.inventory import Inventory, MigInstance
from dra_driver.vocabulary.names import GpuUUID


class GpuBackend(Protocol):
    """Discovery and the few mutations Tessera performs (MIG mode, MIG instances).

    Errors are raised as `InventoryError`/`MigError`/`PlacementTakenError`, never as library errors.
    """

    def inventory(self) -> Inventory:
        """A fresh read of every GPU, including MIG mode and live MIG instances."""
        ...

    def set_mig_mode(self, *, gpu: GpuUUID, enabled: bool) -> None:
        """Switch MIG mode; only called for GPUs whose architecture toggles without a reset."""
        ...

    def create_mig_instance(self, *, gpu: GpuUUID, profile_id: int, start: int) -> MigInstance:
        """Create a GPU instance at the placement and one compute instance spanning it."""
        ...

    def destroy_mig_instance(self, *, gpu: GpuUUID, gi_id: int) -> None:
        """Destroy the GPU instance's compute instances, then the GPU instance. Missing is not an error."""
        ...

    def close(self) -> None: ...


@runtime_checkable
class PcieSource(Protocol):
    """A backend that reads a GPU's PCIe traffic (NVML; the simulated node has no link)."""

    def pcie_traffic(self, *, gpu: GpuUUID) -> LinkTraffic:
        """One reading; `InventoryError` where the GPU or its driver reads none."""
        ...


def pcie_source(backend: object) -> PcieSource | None:
    """`backend`, or the backend it wraps (`inner`: the daemon times MIG operations around it), where it
    reads PCIe traffic; None where it does not."""
    for candidate in (backend, getattr(backend, "inner", None)):
        if isinstance(candidate, PcieSource):
            return candidate
    return None
