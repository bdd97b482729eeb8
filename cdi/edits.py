"""What a container receives for a prepared claim: one CDI spec, one CDI device per allocated device (pure).

Each device's own edits come from its family (dra_driver/core/families). Claim-wide edits (control nodes,
driver libraries, each family's claim edits, and the interception library with the claim directory when any
device uses it) sit in the spec's own containerEdits, which a runtime applies once for any of the spec's
devices.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from cdi.spec import Device, Spec, SpecError
from dra_driver.core import families
from dra_driver.core.allocation import ClaimPlan
from dra_driver.core.families.base import AnyPlanned
from dra_driver.core.families.protocol import NamedVisible
from dra_driver.libtessera.names import (
    CLAIM_DIRS_ENV,
    CONTAINER_LIBRARY_PATH,
    LD_PRELOAD_ENV,
    LIMITS_FILE_NAME,
    REGION_FILE_NAME,
    SHARED_DIR_NAME,
    HamiEnv,
    claim_dir_env,
    container_claim_dir,
    container_gpu_dir,
)
from dra_driver.vocabulary.container import ContainerEdits, Mount
from dra_driver.vocabulary.errors import ConfigError, MigError
from dra_driver.vocabulary.inventory import NO_DRIVER_FILES, DriverFiles, DriverMount, Inventory
from dra_driver.vocabulary.names import (
    CDI_KIND,
    CUDA_VISIBLE_DEVICES_ENV,
    NVIDIA_VISIBLE_DEVICES_VOID,
    DeviceName,
    cdi_device_name,
    cdi_qualified_name,
)

RO_BIND = ("ro", "nosuid", "nodev", "bind")
RW_BIND = ("rw", "nosuid", "nodev", "bind")


@dataclass(frozen=True, slots=True)
class HostLayout:
    """Host paths the edits point at, as strings (this module does no I/O)."""

    library_path: str  # libtessera.so on the host
    claim_dir: str  # this claim's host directory (limits file; shared/ with the accounting region)
    driver_library_dirs: tuple[str, ...] = ()  # host driver library/tool dirs, mounted read-only in place
    gpus_dir: str = ""  # host root of the GPUs' view directories ("": none mounted)
    driver_files: DriverFiles = NO_DRIVER_FILES  # below the driver root (dra_driver.io.driver_root)


def device_cdi_name(plan: ClaimPlan, device: AnyPlanned) -> str:
    return cdi_device_name(plan.uid, device.device, device.share_id)


def cdi_ids(plan: ClaimPlan, device: AnyPlanned) -> tuple[str, ...]:
    return (cdi_qualified_name(device_cdi_name(plan, device)),)


def library_ordinals(plan: ClaimPlan) -> dict[DeviceName, int]:
    """HAMi keys limits by device index within the container; the claim's library devices by GPU minor."""
    using = [d for d in plan.devices if d.library_limits is not None]
    return {d.device: i for i, d in enumerate(sorted(using, key=lambda d: d.gpu_index))}


def _device_edits(
    plan: ClaimPlan, d: AnyPlanned, inventory: Inventory, made: Mapping[DeviceName, object]
) -> ContainerEdits:
    gpu = inventory.gpu_by_index(d.gpu_index)
    if gpu is None:
        raise MigError(f"device {d.device}: GPU {d.gpu_index} vanished from the inventory")
    family = families.family(d.family)
    edits = family.device_edits(d, gpu, made.get(d.device))
    limits = d.library_limits
    if limits is None:
        return edits
    i = library_ordinals(plan)[d.device]
    hami = (
        f"{HamiEnv.MEMORY_LIMIT_PREFIX}{i}={limits.memory_bytes >> 20}m",
        f"{HamiEnv.SM_LIMIT_PREFIX}{i}={limits.cores}",
    )
    return ContainerEdits(env=edits.env + hami, device_nodes=edits.device_nodes, mounts=edits.mounts)


def _library_edits(plan: ClaimPlan, host: HostLayout) -> ContainerEdits:
    """The interception library, the claim directory and, for time-sliced GPUs, each GPU's read-only view."""
    if plan.library is None:
        return ContainerEdits()
    claim_dir = container_claim_dir(plan.uid)
    mounts = [
        Mount(host_path=host.library_path, container_path=CONTAINER_LIBRARY_PATH, options=RO_BIND),
        # the claim's shared dir read-write, then its limits file read-only over the mount point in it: a
        # root process in the container can neither rewrite nor replace the limits (docs/security.md)
        Mount(host_path=f"{host.claim_dir}/{SHARED_DIR_NAME}", container_path=claim_dir, options=RW_BIND),
        Mount(
            host_path=f"{host.claim_dir}/{LIMITS_FILE_NAME}",
            container_path=f"{claim_dir}/{LIMITS_FILE_NAME}",
            options=RO_BIND,
        ),
    ]
    if host.gpus_dir:
        # the node's view of each shared GPU: its time-division schedule and priority holds
        shared = sorted({lim.gpu_uuid for lim in plan.limits() if lim.time_sliced})
        mounts.extend(
            Mount(host_path=f"{host.gpus_dir}/{g}", container_path=container_gpu_dir(g), options=RO_BIND)
            for g in shared
        )
    priority = min((lim.priority for lim in plan.limits()), default=1)
    env = (
        f"{LD_PRELOAD_ENV}={CONTAINER_LIBRARY_PATH}",
        f"{CLAIM_DIRS_ENV}={claim_dir}",
        f"{claim_dir_env(plan.uid)}={claim_dir}",
        f"{HamiEnv.SHARED_CACHE}={claim_dir}/{REGION_FILE_NAME}",
        f"{HamiEnv.CORE_POLICY}={plan.library.policy}",
        f"{HamiEnv.TASK_PRIORITY}={priority}",
        f"{HamiEnv.LOG_LEVEL}={plan.library.log_level}",
    )
    return ContainerEdits(env=env, mounts=tuple(mounts))


def _visible_devices(plan: ClaimPlan, made: Mapping[DeviceName, object]) -> tuple[str, ...]:
    """CUDA enumerates MIG instances only when named: when a device needs naming, list every device of the
    claim so none is hidden."""
    ids = [_visible_id(d, made) for d in plan.devices]
    if all(i is None for i in ids):
        return ()
    listed = [i if i is not None else str(d.gpu_uuid) for i, d in zip(ids, plan.devices, strict=True)]
    return (f"{CUDA_VISIBLE_DEVICES_ENV}={','.join(dict.fromkeys(listed))}",)


def _visible_id(d: AnyPlanned, made: Mapping[DeviceName, object]) -> str | None:
    f = families.family(d.family)
    return f.visible_id(d, made.get(d.device)) if isinstance(f, NamedVisible) else None


def _driver_mounts(plan: ClaimPlan, host: HostLayout) -> list[Mount]:
    """The driver's libraries and tools (the MPS ones for MPS claims), and any extra directories in place."""
    files: list[DriverMount] = list(host.driver_files.common)
    for family in plan.families():
        files += host.driver_files.of(family)
    mounts = [Mount(host_path=d, container_path=d, options=RO_BIND) for d in host.driver_library_dirs]
    mounts += [Mount(host_path=f.host_path, container_path=f.container_path, options=RO_BIND) for f in files]
    return mounts


def _claim_edits(
    plan: ClaimPlan, inventory: Inventory, made: Mapping[DeviceName, object], host: HostLayout
) -> ContainerEdits:
    # The toolkit, where it is the runtime, would add every GPU of the node for NVIDIA_VISIBLE_DEVICES=all
    # (set by CUDA base images): the claim's CDI devices are all the container may have.
    env: list[str] = [NVIDIA_VISIBLE_DEVICES_VOID]
    mounts = _driver_mounts(plan, host)
    nodes = list(inventory.control_nodes)
    for part in (
        _library_edits(plan, host),
        *(f.claim_edits(plan.of(f.name), made) for f in families.claim_wide() if f.name in plan.families()),
    ):
        env.extend(part.env)
        mounts.extend(part.mounts)
        nodes.extend(part.device_nodes)
    env.extend(_visible_devices(plan, made))
    return ContainerEdits(env=tuple(env), device_nodes=tuple(nodes), mounts=tuple(mounts))


def claim_spec(
    *,
    plan: ClaimPlan,
    inventory: Inventory,
    host: HostLayout,
    made: Mapping[DeviceName, object] | None = None,
) -> Spec:
    """The claim's CDI spec. `made`: what each device's host part created for it (a MIG instance, ...).
    ConfigError when the edits do not make a valid spec."""
    created = made or {}
    try:
        return Spec(
            kind=CDI_KIND,
            devices=tuple(
                Device(
                    name=device_cdi_name(plan, d), container_edits=_device_edits(plan, d, inventory, created)
                )
                for d in plan.devices
            ),
            container_edits=_claim_edits(plan, inventory, created, host),
        )
    except SpecError as e:
        raise ConfigError(str(e)) from e
