"""What a container receives for a prepared claim: one CDI spec, one CDI device per allocated device (pure).

Claim-wide edits (control nodes, driver libraries, the interception library, the claim directory) sit in
the spec's own containerEdits, which a runtime applies once for any of the spec's devices; per-device edits
carry that device's nodes and HAMi-style per-index limits.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from cdi.spec import ContainerEdits, Device, DeviceNode, Mount, Spec
from dra_driver.allocation import ClaimPlan, PlannedDevice
from dra_driver.errors import MigError
from dra_driver.model import DeviceNode as HostNode
from dra_driver.model import Inventory, MigInstance
from dra_driver.names import (
    CDI_KIND,
    CLAIM_DIRS_ENV,
    CONTAINER_LIBRARY_PATH,
    CUDA_VISIBLE_DEVICES_ENV,
    LD_PRELOAD_ENV,
    REGION_FILE_NAME,
    DeviceName,
    Family,
    HamiEnv,
    cdi_device_name,
    cdi_qualified_name,
    claim_dir_env,
    container_claim_dir,
    container_gpu_dir,
)

RO_BIND = ("ro", "nosuid", "nodev", "bind")
RW_BIND = ("rw", "nosuid", "nodev", "bind")


@dataclass(frozen=True, slots=True)
class HostLayout:
    """Host paths the edits point at, as strings (this module does no I/O)."""

    library_path: str  # libtessera.so on the host
    claim_dir: str  # this claim's host directory (limits file, accounting region)
    driver_library_dirs: tuple[str, ...] = ()  # host driver library/tool dirs, mounted read-only in place
    gpus_dir: str = ""  # host root of the GPUs' view directories ("": none mounted)


def _node(node: HostNode) -> DeviceNode:
    return DeviceNode(path=node.path, host_path=node.path, type="c", major=node.major, minor=node.minor)


def device_cdi_name(plan: ClaimPlan, device: PlannedDevice) -> str:
    return cdi_device_name(plan.uid, device.device, device.share_id)


def cdi_ids(plan: ClaimPlan, device: PlannedDevice) -> tuple[str, ...]:
    return (cdi_qualified_name(device_cdi_name(plan, device)),)


def vgpu_ordinals(plan: ClaimPlan) -> dict[DeviceName, int]:
    """HAMi keys limits by device index within the container; order the claim's vgpu devices by GPU minor."""
    vgpus = sorted((d for d in plan.devices if d.family is Family.VGPU), key=lambda d: d.gpu_index)
    return {d.device: i for i, d in enumerate(vgpus)}


def _instance(device: PlannedDevice, mig_instances: Mapping[DeviceName, MigInstance]) -> MigInstance:
    assert device.mig is not None
    inst = device.mig.instance or mig_instances.get(device.device)
    if inst is None:
        raise MigError(f"device {device.device}: no MIG instance was created for it")
    return inst


def _device_edits(
    plan: ClaimPlan,
    device: PlannedDevice,
    inventory: Inventory,
    mig_instances: Mapping[DeviceName, MigInstance],
    ordinals: Mapping[DeviceName, int],
) -> ContainerEdits:
    gpu = inventory.gpu_by_index(device.gpu_index)
    if gpu is None:
        raise MigError(f"device {device.device}: GPU {device.gpu_index} vanished from the inventory")
    nodes = [_node(gpu.device_node)]
    env: list[str] = []
    if device.family is Family.MIG:
        nodes.extend(_node(n) for n in _instance(device, mig_instances).device_nodes)
    elif device.family is Family.VGPU:
        assert device.limits is not None
        i = ordinals[device.device]
        env.append(f"{HamiEnv.MEMORY_LIMIT_PREFIX}{i}={device.limits.memory_bytes >> 20}m")
        env.append(f"{HamiEnv.SM_LIMIT_PREFIX}{i}={device.limits.cores}")
    return ContainerEdits(env=tuple(env), device_nodes=tuple(nodes))


def _claim_edits(
    plan: ClaimPlan,
    inventory: Inventory,
    mig_instances: Mapping[DeviceName, MigInstance],
    host: HostLayout,
) -> ContainerEdits:
    env: list[str] = []
    mounts = [Mount(host_path=d, container_path=d, options=RO_BIND) for d in host.driver_library_dirs]
    if plan.vgpu is not None:
        claim_dir = container_claim_dir(plan.uid)
        mounts.append(
            Mount(host_path=host.library_path, container_path=CONTAINER_LIBRARY_PATH, options=RO_BIND)
        )
        mounts.append(Mount(host_path=host.claim_dir, container_path=claim_dir, options=RW_BIND))
        if host.gpus_dir:
            # the node's view of each shared GPU: its time-division schedule and priority holds, read-only
            shared = sorted({d.gpu_uuid for d in plan.devices if d.family is Family.VGPU})
            mounts.extend(
                Mount(host_path=f"{host.gpus_dir}/{g}", container_path=container_gpu_dir(g), options=RO_BIND)
                for g in shared
            )
        env += [
            f"{LD_PRELOAD_ENV}={CONTAINER_LIBRARY_PATH}",
            f"{CLAIM_DIRS_ENV}={claim_dir}",
            f"{claim_dir_env(plan.uid)}={claim_dir}",
            f"{HamiEnv.SHARED_CACHE}={claim_dir}/{REGION_FILE_NAME}",
            f"{HamiEnv.CORE_POLICY}={plan.vgpu.sm_limit_policy.value}",
            f"{HamiEnv.TASK_PRIORITY}={plan.vgpu.priority}",
            f"{HamiEnv.LOG_LEVEL}={plan.vgpu.log_level}",
        ]
    if any(d.family is Family.MIG for d in plan.devices):
        # CUDA enumerates MIG instances only when named; list every device of the claim so none is hidden.
        visible = [
            _instance(d, mig_instances).uuid if d.family is Family.MIG else str(d.gpu_uuid)
            for d in plan.devices
        ]
        env.append(f"{CUDA_VISIBLE_DEVICES_ENV}={','.join(dict.fromkeys(visible))}")
    return ContainerEdits(
        env=tuple(env),
        device_nodes=tuple(_node(n) for n in inventory.control_nodes),
        mounts=tuple(mounts),
    )


def claim_spec(
    *,
    plan: ClaimPlan,
    inventory: Inventory,
    host: HostLayout,
    mig_instances: Mapping[DeviceName, MigInstance] | None = None,
) -> Spec:
    """The claim's CDI spec. `mig_instances`: the instance created (or reused) for each Tessera MIG device."""
    created = mig_instances or {}
    ordinals = vgpu_ordinals(plan)
    devices: Sequence[Device] = [
        Device(
            name=device_cdi_name(plan, d),
            container_edits=_device_edits(plan, d, inventory, created, ordinals),
        )
        for d in plan.devices
    ]
    return Spec(
        kind=CDI_KIND,
        devices=tuple(devices),
        container_edits=_claim_edits(plan, inventory, created, host),
    )
