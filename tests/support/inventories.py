"""Inventory values built straight from the product tables, for the slice-builder tests."""

from __future__ import annotations

from dra_driver.core.profiles import GpuProduct, product
from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.inventory import Gpu, Inventory, MigInstance
from dra_driver.vocabulary.names import GpuUUID


def make_gpu(
    index: int,
    prod: GpuProduct | str,
    *,
    mig_enabled: bool = False,
    instances: tuple[tuple[str, int], ...] = (),
    healthy: bool = True,
) -> Gpu:
    p = product(prod) if isinstance(prod, str) else prod
    uuid = GpuUUID(f"GPU-{index:08d}-0000-0000-0000-000000000000")
    live = []
    for n, (name, start) in enumerate(instances):
        prof = p.profile_by_name(name)
        assert prof is not None
        live.append(
            MigInstance(
                parent_uuid=uuid,
                profile_id=prof.profile_id,
                profile_name=prof.name,
                start=start,
                size=prof.memory_slices,
                gi_id=n + 1,
                ci_id=0,
                uuid=f"MIG-{index:04d}{n:04d}-0000-0000-0000-000000000000",
            )
        )
    return Gpu(
        index=index,
        uuid=uuid,
        product_name=p.product_name,
        brand="Nvidia",
        architecture=p.architecture,
        cuda_compute_capability=p.cuda_compute_capability,
        memory_bytes=p.memory_bytes,
        multiprocessors=p.multiprocessors,
        pci_bus_id=f"00000000:{index + 16:02X}:00.0",
        device_node=DeviceNode(f"/dev/nvidia{index}", 195, index),
        mig_capable=p.mig_capable,
        mig_enabled=mig_enabled,
        memory_slice_count=p.memory_slice_count,
        copy_engines=p.copy_engines,
        decoders=p.decoders,
        encoders=p.encoders,
        jpeg_engines=p.jpeg_engines,
        ofa_engines=p.ofa_engines,
        mig_profiles=p.mig_profiles,
        mig_instances=tuple(live),
        healthy=healthy,
    )


def make_inventory(*gpus: Gpu) -> Inventory:
    return Inventory(driver_version="535.104.05", cuda_driver_version="12.2", gpus=gpus)
