"""A GPU backend that times its MIG operations into the daemon's metrics (`tessera_mig_operation_*`)."""

from __future__ import annotations

from dra_driver.backends.base import GpuBackend
from dra_driver.vocabulary.inventory import Inventory, MigInstance
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.metrics import timed_mig


class TimedBackend:
    """`GpuBackend` around another one; everything is passed through, MIG create and destroy are timed."""

    def __init__(self, inner: GpuBackend) -> None:
        self.inner = inner

    def inventory(self) -> Inventory:
        return self.inner.inventory()

    def set_mig_mode(self, *, gpu: GpuUUID, enabled: bool) -> None:
        self.inner.set_mig_mode(gpu=gpu, enabled=enabled)

    def create_mig_instance(self, *, gpu: GpuUUID, profile_id: int, start: int) -> MigInstance:
        with timed_mig("create"):
            return self.inner.create_mig_instance(gpu=gpu, profile_id=profile_id, start=start)

    def destroy_mig_instance(self, *, gpu: GpuUUID, gi_id: int) -> None:
        with timed_mig("destroy"):
            self.inner.destroy_mig_instance(gpu=gpu, gi_id=gi_id)

    def close(self) -> None:
        self.inner.close()
