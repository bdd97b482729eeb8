"""The interface every GPU backend (NVML, simulated) implements."""

from __future__ import annotations

from typing import Protocol

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
