"""The whole-GPU family: device `gpu-<i>`, DeviceClass `gpu.tessera.dev`, config kind `GpuConfig` (pure).

A whole GPU consumes its GPU's whole counter set, so nothing else is allocated on that GPU meanwhile. It is
the one device still published when the API server lacks partitionable devices (degraded: no counters).
"""

from __future__ import annotations

from dataclasses import dataclass

from dra_driver.core.config_schema import ConfigKind
from dra_driver.core.families.base import (
    Allocated,
    GpuOffer,
    Json,
    NodeRecords,
    PlannedDevice,
    not_in_mig_mode,
)
from dra_driver.core.families.protocol import DeviceFamily, Ordered, OrderKey
from dra_driver.core.families.published import consumes, gpu_attributes, mib_quantity, string
from dra_driver.vocabulary.inventory import Gpu
from dra_driver.vocabulary.names import Attr, Cap, DeviceName, Family, gpu_device_name, qualified

NAME = Family("gpu")


@dataclass(frozen=True, slots=True)
class GpuConfig:
    """A whole GPU has nothing to tune yet; the kind exists so configs can name it explicitly."""


class WholeGpu(DeviceFamily[GpuConfig], Ordered):
    name = NAME
    rank = 0
    order_group = 2
    config = ConfigKind(kind="GpuConfig", family=NAME, type=GpuConfig, meaning="a whole GPU")
    class_meaning = "a whole GPU, exclusively."

    def parse_name(self, part: str) -> tuple[()] | None:
        return () if part == "" else None

    def possible_devices(self, gpu: Gpu) -> tuple[DeviceName, ...]:
        return (gpu_device_name(gpu.index),)

    def order_key(self, device: Json, index: int) -> OrderKey:
        return (0, 0, False, -index, 0)  # taken from the last GPU down, away from the sharing end

    def offer(self, o: GpuOffer) -> tuple[Json, ...]:
        if not o.shareable:
            return ()
        gpu = o.gpu
        device: Json = {
            "name": gpu_device_name(gpu.index),
            "attributes": {
                **gpu_attributes(gpu, o.inventory, NAME),
                qualified(Attr.UUID): string(gpu.uuid),
            },
            "capacity": {
                Cap.MEMORY: {"value": mib_quantity(gpu.memory_bytes)},
                Cap.MULTIPROCESSORS: {"value": str(gpu.multiprocessors)},
            },
        }
        if o.counters is not None:
            device["consumesCounters"] = consumes(gpu, o.counters)
        return (device,)

    def plan(self, d: Allocated[GpuConfig], recorded: NodeRecords) -> PlannedDevice[GpuConfig, None]:
        not_in_mig_mode(d, "a whole GPU")
        return d.planned(NAME, None)


FAMILY = WholeGpu()
