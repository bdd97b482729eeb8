"""The NVML backend: real GPUs through pynvml (nvidia-ml-py).

Every pynvml error is translated here into Tessera's errors (`raise ... from e`); nothing above this module
sees an `NVMLError`. Facts used are in shared/facts/mig-and-nvml.md.
"""

from __future__ import annotations

import ctypes
import dataclasses
import os
import re
import threading
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any, TypeVar

import pynvml
import structlog

from dra_driver.backends.device_nodes import char_major, mig_cap_nodes
from dra_driver.backends.meminfo import host_memory
from dra_driver.backends.nvml_calls import has_code, text
from dra_driver.backends.nvml_health import NvmlHealthWatcher
from dra_driver.backends.nvml_pcie import link_traffic
from dra_driver.backends.nvml_topology import fabric, nvlink_ends
from dra_driver.backends.sysfs import pci_place
from dra_driver.core.families.published import pci_bus_id
from dra_driver.core.paging import LinkTraffic
from dra_driver.core.profiles import find_product, profile_order
from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.errors import ConfigError, InventoryError, MigError, PlacementTakenError
from dra_driver.vocabulary.inventory import (
    NO_NVLINK,
    Architecture,
    FaultKind,
    Gpu,
    GpuFault,
    Inventory,
    MigInstance,
    MigProfile,
    NvLinks,
)
from dra_driver.vocabulary.names import (
    DEFAULT_DRIVER_PROC_ROOT,
    DEFAULT_SYSFS_ROOT,
    DRIVER_PROC_ROOT_ENV,
    SYSFS_ROOT_ENV,
    GpuUUID,
)

T = TypeVar("T")
log = structlog.get_logger(__name__)

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
_CAPS_UNDER_PROC = Path("driver/nvidia/capabilities")

_ARCHITECTURES = {
    2: Architecture.KEPLER,
    3: Architecture.MAXWELL,
    4: Architecture.PASCAL,
    5: Architecture.VOLTA,
    6: Architecture.TURING,
    7: Architecture.AMPERE,
    8: Architecture.ADA,
    9: Architecture.HOPPER,
    10: Architecture.BLACKWELL,
}
# GPU-instance profile indices worth asking about (1, 2, 3, 4, 7 slices; the +me and 1g-double revisions).
_GI_PROFILE_INDICES = (0, 1, 2, 3, 4, 7, 8, 9)
# Compute-instance profile index for a GI of N compute slices (a single CI spanning the whole GI).
_CI_PROFILE_INDEX = {1: 0, 2: 1, 3: 2, 4: 3, 7: 4, 8: 5, 6: 6}
# CUDA cores per SM by compute-capability major (GetNumGpuCores counts cores, Tessera publishes SMs).
_CORES_PER_SM = {7: 64, 8: 128, 9: 128, 10: 128, 12: 128}
_PROFILE_NAME_RE = re.compile(r"^(?:MIG )?(\d+g\.\d+gb(?:\+me)?)$")


def architecture_of(code: int) -> Architecture:
    return _ARCHITECTURES.get(code, Architecture.UNKNOWN)


def cuda_version_text(code: int) -> str:
    """NVML's CUDA driver version integer: 12040 → "12.4"."""
    return f"{code // 1000}.{(code % 1000) // 10}"


def profile_name(raw: str) -> str | None:
    """`MIG 1g.10gb+me` → `1g.10gb+me`; profiles Tessera cannot name (e.g. `+gfx`, `-me`) → None."""
    m = _PROFILE_NAME_RE.match(raw.strip())
    return m.group(1) if m else None


def multiprocessors_from_cores(cores: int, compute_capability: str) -> int:
    major = int(compute_capability.split(".", 1)[0])
    minor = int(compute_capability.split(".", 1)[1] or 0)
    per_sm = 64 if (major, minor) == (8, 0) else _CORES_PER_SM.get(major, 128)
    return cores // per_sm


def translate(e: pynvml.NVMLError, what: str, *, mig: bool = False) -> InventoryError:
    """Tessera's error for an NVML failure; the caller raises it `from e`."""
    code = getattr(e, "value", None)
    message = f"{what}: NVML says {e}"
    if code == pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES and mig:
        return PlacementTakenError(
            f"{message} (the placement overlaps an instance, or the profile is at its maximum)"
        )
    if code == pynvml.NVML_ERROR_IN_USE and mig:
        return MigError(f"{message} (processes or compute instances still use it)")
    if code == pynvml.NVML_ERROR_NO_PERMISSION:
        return (MigError if mig else InventoryError)(
            f"{message} (the plugin needs root or the MIG config capability)"
        )
    if code in (pynvml.NVML_ERROR_LIBRARY_NOT_FOUND, pynvml.NVML_ERROR_DRIVER_NOT_LOADED):
        return InventoryError(f"{message}: is the NVIDIA driver installed and libnvidia-ml.so.1 visible?")
    return (MigError if mig else InventoryError)(message)


def load_library(path: Path) -> None:
    """Makes pynvml use the libnvidia-ml at `path`: the loader's search path cannot be changed once a process
    runs, and a driver root (the GPU Operator's, or the host's seen from a container) is not on it."""
    if pynvml.nvmlLib is not None:
        return  # loaded already: NVML stays with the library it was initialised from
    try:
        pynvml.nvmlLib = ctypes.CDLL(str(path))
    except OSError as e:
        raise ConfigError(f"cannot load the NVML library {path} from the driver root: {e}") from e
    pynvml._nvmlGetFunctionPointer_cache.clear()


class NvmlBackend:
    """`GpuBackend` over NVML. NVML is initialised once per backend and shut down by `close()`.

    `proc_root` is where the driver's /proc files are: the device majors and the MIG capability minors, and
    `meminfo` (the host's memory, which backs memoryOversubscription);
    `sysfs_root` where the PCI topology is (pcieRoot, numaNode: dra_driver/backends/sysfs.py).
    """

    def __init__(
        self,
        *,
        proc_root: Path = Path(DEFAULT_DRIVER_PROC_ROOT),
        watcher: NvmlHealthWatcher | None = None,
        sysfs_root: Path = Path(DEFAULT_SYSFS_ROOT),
    ) -> None:
        self._sysfs_root = sysfs_root
        self._lock = threading.Lock()
        self._watcher = watcher
        self._last: dict[GpuUUID, Gpu] = {}  # each GPU as last read: what a GPU that fails now was
        self._caps_root = proc_root / _CAPS_UNDER_PROC
        self._meminfo = proc_root / "meminfo"
        self._caps_major = char_major("nvidia-caps", proc_root / "devices") or 0
        self._uvm_major = char_major("nvidia-uvm", proc_root / "devices") or 0

    @classmethod
    def open(cls, *, watch_health: bool = False, library: Path | None = None) -> NvmlBackend:
        """NVML initialised; the /proc root from $TESSERA_DRIVER_PROC_ROOT (default /proc), the sysfs root
        from $TESSERA_SYSFS_ROOT (default /sys); `watch_health`:
        a thread collects XID and double-bit ECC events (the node daemon's health checks add them);
        `library`: libnvidia-ml by path (a driver root's), instead of the loader's search path."""
        proc_root = Path(os.environ.get(DRIVER_PROC_ROOT_ENV) or DEFAULT_DRIVER_PROC_ROOT)
        if library is not None:
            load_library(library)
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as e:
            raise translate(e, "initialising NVML") from e
        watcher = NvmlHealthWatcher() if watch_health else None
        if watcher is not None:
            watcher.start()
        sysfs_root = Path(os.environ.get(SYSFS_ROOT_ENV) or DEFAULT_SYSFS_ROOT)
        return cls(proc_root=proc_root, watcher=watcher, sysfs_root=sysfs_root)

    @contextmanager
    def _nvml(self, what: str, *, mig: bool = False) -> Iterator[None]:
        try:
            yield
        except pynvml.NVMLError as e:
            raise translate(e, what, mig=mig) from e

    def _call(self, what: str, fn: Callable[..., T], *args: Any, mig: bool = False) -> T:
        with self._nvml(what, mig=mig):
            return fn(*args)

    # -- discovery -------------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._lock, self._nvml("reading the GPU inventory"):
            driver = text(pynvml.nvmlSystemGetDriverVersion())
            cuda = cuda_version_text(pynvml.nvmlSystemGetCudaDriverVersion())
            count = pynvml.nvmlDeviceGetCount()
            gpus = self._gpus(count)
        return Inventory(
            driver_version=driver,
            cuda_driver_version=cuda,
            gpus=tuple(sorted(gpus, key=lambda g: g.index)),
            control_nodes=(
                DeviceNode("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
                DeviceNode("/dev/nvidia-uvm", self._uvm_major, 0),
                DeviceNode("/dev/nvidia-uvm-tools", self._uvm_major, 1),
            ),
            host_memory_bytes=host_memory(self._meminfo),
        )

    def _gpus(self, count: int) -> tuple[Gpu, ...]:
        """Every GPU with its faults: a GPU NVML fails on (or no longer lists) is its last reading, lost or
        failing; the watcher's events are added to each."""
        read: dict[GpuUUID, Gpu] = {}
        links: dict[GpuUUID, tuple[bool, tuple[str, ...]]] = {}
        for i in range(count):
            try:
                h = pynvml.nvmlDeviceGetHandleByIndex(i)
                gpu = self._gpu(h)
                links[gpu.uuid] = nvlink_ends(h)
            except pynvml.NVMLError as e:
                failed = self._failed(i, e)
                if failed is None:
                    raise
                gpu = failed
            read[gpu.uuid] = gpu
        # A link's far end is named by its PCI bus id: peers are known once every GPU has been read.
        by_bus = {pci_bus_id(g.pci_bus_id): g.index for g in read.values()}
        for gid, (switch, buses) in links.items():
            peers = tuple(sorted({by_bus[b] for b in buses if b in by_bus}))
            nvlinks = NvLinks(switch=switch, peers=peers) if switch or peers else NO_NVLINK
            read[gid] = self._last[gid] = dataclasses.replace(read[gid], nvlinks=nvlinks)
        for uuid, last in self._last.items():
            if uuid not in read:
                lost = GpuFault(FaultKind.LOST, detail="NVML no longer lists it")
                read[uuid] = dataclasses.replace(last, faults=(lost,))
        watched = self._watcher.faults if self._watcher is not None else (lambda _uuid: ())
        return tuple(dataclasses.replace(g, faults=(*g.faults, *watched(g.uuid))) for g in read.values())

    def _failed(self, index: int, e: pynvml.NVMLError) -> Gpu | None:
        """The last reading of GPU `index`, marked lost or failing; None when it was never read."""
        last = next((g for g in self._last.values() if g.index == index), None)
        if last is None:
            return None
        kind = FaultKind.LOST if has_code(e, pynvml.NVML_ERROR_GPU_IS_LOST) else FaultKind.NVML_ERROR
        log.warning("nvml.gpu_failing", gpu=last.uuid, kind=kind.value, error=str(e))
        return dataclasses.replace(last, faults=(GpuFault(kind, detail=f"NVML: {e}"),))

    def _gpu(self, h: Any) -> Gpu:
        minor = pynvml.nvmlDeviceGetMinorNumber(h)
        uuid = GpuUUID(text(pynvml.nvmlDeviceGetUUID(h)))
        name = text(pynvml.nvmlDeviceGetName(h))
        cc_major, cc_minor = pynvml.nvmlDeviceGetCudaComputeCapability(h)
        cc = f"{cc_major}.{cc_minor}"
        known = find_product(name)
        try:
            sms = multiprocessors_from_cores(pynvml.nvmlDeviceGetNumGpuCores(h), cc)
        except pynvml.NVMLError:
            sms = known.multiprocessors if known else 0
        try:
            current, _pending = pynvml.nvmlDeviceGetMigMode(h)
            mig_capable, mig_enabled = True, current == pynvml.NVML_DEVICE_MIG_ENABLE
        except pynvml.NVMLError as e:
            if not has_code(e, pynvml.NVML_ERROR_NOT_SUPPORTED):
                raise
            mig_capable, mig_enabled = False, False
        profiles = self._profiles(h) if mig_capable else ()
        bus_id = text(pynvml.nvmlDeviceGetPciInfo(h).busId)
        place = pci_place(self._sysfs_root, bus_id)
        largest = max(profiles, key=lambda p: p.memory_slices, default=None)
        engines = known or largest
        return Gpu(
            index=minor,
            uuid=uuid,
            product_name=name,
            brand=_brand(pynvml.nvmlDeviceGetBrand(h)),
            architecture=architecture_of(pynvml.nvmlDeviceGetArchitecture(h)),
            cuda_compute_capability=cc,
            memory_bytes=int(pynvml.nvmlDeviceGetMemoryInfo(h).total),
            multiprocessors=sms,
            pci_bus_id=bus_id,
            device_node=DeviceNode(f"/dev/nvidia{minor}", NVIDIA_MAJOR, minor),
            mig_capable=mig_capable,
            mig_enabled=mig_enabled,
            memory_slice_count=largest.memory_slices if largest else 0,
            copy_engines=engines.copy_engines if engines else 0,
            decoders=engines.decoders if engines else 0,
            encoders=engines.encoders if engines else 0,
            jpeg_engines=engines.jpeg_engines if engines else 0,
            ofa_engines=engines.ofa_engines if engines else 0,
            mig_profiles=profiles,
            mig_instances=self._instances(h, minor, uuid, profiles) if mig_enabled else (),
            pcie_root=place.pcie_root,
            numa_node=place.numa_node,
            numa_near=place.numa_near,
            fabric=fabric(h),
        )

    def _profiles(self, h: Any) -> tuple[MigProfile, ...]:
        found: list[MigProfile] = []
        for index in _GI_PROFILE_INDICES:
            try:
                info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
            except pynvml.NVMLError as e:
                if has_code(e, pynvml.NVML_ERROR_NOT_SUPPORTED, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    continue
                raise
            name = profile_name(text(info.name))
            if name is None:
                log.info("nvml.profile_skipped", name=text(info.name), id=info.id)
                continue
            placements = _possible_placements(h, info.id)
            found.append(
                MigProfile(
                    profile_id=info.id,
                    name=name,
                    memory_mib=int(info.memorySizeMB),
                    multiprocessors=info.multiprocessorCount,
                    compute_slices=info.sliceCount,
                    memory_slices=placements[0][1] if placements else 0,
                    copy_engines=info.copyEngineCount,
                    decoders=info.decoderCount,
                    encoders=info.encoderCount,
                    jpeg_engines=info.jpegCount,
                    ofa_engines=info.ofaCount,
                    max_instances=info.instanceCount,
                    placement_starts=tuple(start for start, _size in placements),
                )
            )
        # the order of dra_driver.core.profiles (and so of the published devices), not of NVML's profile
        # indices
        return tuple(sorted(found, key=profile_order))

    def _instances(
        self, h: Any, minor: int, uuid: GpuUUID, profiles: tuple[MigProfile, ...]
    ) -> tuple[MigInstance, ...]:
        mig_uuids = _mig_uuids(h)
        found: list[MigInstance] = []
        for prof in profiles:
            for gi in _gpu_instances(h, prof):
                info = pynvml.nvmlGpuInstanceGetInfo(gi)
                ci_ids = [pynvml.nvmlComputeInstanceGetInfo(ci).id for ci in _compute_instances(gi, prof)]
                ci_id = min(ci_ids, default=0)
                nodes = (
                    mig_cap_nodes(
                        gpu_minor=minor,
                        gi_id=info.id,
                        ci_id=ci_id,
                        caps_major=self._caps_major,
                        caps_root=self._caps_root,
                    )
                    if ci_ids
                    else ()
                )
                found.append(
                    MigInstance(
                        parent_uuid=uuid,
                        profile_id=prof.profile_id,
                        profile_name=prof.name,
                        start=info.placement.start,
                        size=info.placement.size,
                        gi_id=info.id,
                        ci_id=ci_id,
                        uuid=mig_uuids.get((info.id, ci_id), ""),
                        device_nodes=nodes,
                    )
                )
        return tuple(sorted(found, key=lambda m: m.start))

    def pcie_traffic(self, *, gpu: GpuUUID) -> LinkTraffic:
        """The GPU's PCIe throughput (NVML's last 20 ms) and link; `InventoryError` where NVML cannot tell
        (NotSupported: vGPU guests, some boards). Not under the backend's lock: each reading waits 20 ms."""
        with self._nvml(f"reading the PCIe throughput of GPU {gpu}"):
            return link_traffic(pynvml.nvmlDeviceGetHandleByUUID(gpu.encode()))

    # -- mutations --------------------------------------------------------------------------------

    def _handle(self, gpu: GpuUUID) -> Any:
        return self._call(f"finding GPU {gpu}", pynvml.nvmlDeviceGetHandleByUUID, gpu.encode())

    def set_mig_mode(self, *, gpu: GpuUUID, enabled: bool) -> None:
        mode = pynvml.NVML_DEVICE_MIG_ENABLE if enabled else pynvml.NVML_DEVICE_MIG_DISABLE
        with self._lock:
            h = self._handle(gpu)
            self._call(
                f"setting MIG mode of {gpu} to {enabled}", pynvml.nvmlDeviceSetMigMode, h, mode, mig=True
            )
            current, pending = self._call("reading MIG mode", pynvml.nvmlDeviceGetMigMode, h, mig=True)
        if current != mode:
            raise MigError(f"GPU {gpu}: MIG mode is pending ({pending}) and needs a GPU reset to take effect")

    def create_mig_instance(self, *, gpu: GpuUUID, profile_id: int, start: int) -> MigInstance:
        what = f"creating MIG instance (profile {profile_id} at {start}) on {gpu}"
        with self._lock, self._nvml(what, mig=True):
            h = self._handle(gpu)
            prof = next((p for p in self._profiles(h) if p.profile_id == profile_id), None)
            if prof is None or start not in prof.placement_starts:
                raise MigError(f"{what}: no such profile or placement on this GPU")
            placement = pynvml.c_nvmlGpuInstancePlacement_t()
            placement.start, placement.size = start, prof.memory_slices
            # pynvml hands the argument to C as it is, and C takes a pointer: passing the structure itself
            # puts (size << 32 | start) where the driver reads an address.
            gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(placement))
            try:
                ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
                    gi,
                    _CI_PROFILE_INDEX[prof.compute_slices],
                    pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED,
                )
                pynvml.nvmlGpuInstanceCreateComputeInstance(gi, ci_info.id)
            except (pynvml.NVMLError, KeyError):
                pynvml.nvmlGpuInstanceDestroy(gi)  # leave no half-made instance behind
                raise
            gi_id = pynvml.nvmlGpuInstanceGetInfo(gi).id
            minor = pynvml.nvmlDeviceGetMinorNumber(h)
            made = self._instances(h, minor, gpu, (prof,))
        created = next((m for m in made if m.gi_id == gi_id), None)
        if created is None:
            raise MigError(f"{what}: the new GPU instance {gi_id} is not listed by NVML")
        log.info("nvml.mig_created", gpu=gpu, profile=prof.name, start=start, gi=gi_id, uuid=created.uuid)
        return created

    def destroy_mig_instance(self, *, gpu: GpuUUID, gi_id: int) -> None:
        what = f"destroying GPU instance {gi_id} on {gpu}"
        with self._lock, self._nvml(what, mig=True):
            h = self._handle(gpu)
            try:
                gi = pynvml.nvmlDeviceGetGpuInstanceById(h, gi_id)
            except pynvml.NVMLError as e:
                if has_code(e, pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                    return  # already gone: destroy is idempotent
                raise
            info = pynvml.nvmlGpuInstanceGetInfo(gi)
            prof = next((p for p in self._profiles(h) if p.profile_id == info.profileId), None)
            if prof is not None:
                for ci in _compute_instances(gi, prof):
                    pynvml.nvmlComputeInstanceDestroy(ci)
            pynvml.nvmlGpuInstanceDestroy(gi)
        log.info("nvml.mig_destroyed", gpu=gpu, gi=gi_id)

    def close(self) -> None:
        if self._watcher is not None:
            self._watcher.stop()
        with self._nvml("shutting NVML down"):
            pynvml.nvmlShutdown()


def _brand(code: int) -> str:
    names = {
        pynvml.NVML_BRAND_TESLA: "Tesla",
        pynvml.NVML_BRAND_NVIDIA: "Nvidia",
        pynvml.NVML_BRAND_QUADRO: "Quadro",
    }
    return names.get(code, "Nvidia" if code == pynvml.NVML_BRAND_NVIDIA_RTX else f"Brand{code}")


def _possible_placements(h: Any, profile_id: int) -> list[tuple[int, int]]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * max(count.value, 1))()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, array, ctypes.byref(count))
    return [(array[i].start, array[i].size) for i in range(count.value)]


def _gpu_instances(h: Any, prof: MigProfile) -> list[Any]:
    count = ctypes.c_uint(0)
    array = (pynvml.c_nvmlGpuInstance_t * max(prof.max_instances, 1))()
    pynvml.nvmlDeviceGetGpuInstances(h, prof.profile_id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def _compute_instances(gi: Any, prof: MigProfile) -> list[Any]:
    index = _CI_PROFILE_INDEX.get(prof.compute_slices)
    if index is None:
        return []
    ci_info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(
        gi, index, pynvml.NVML_COMPUTE_INSTANCE_ENGINE_PROFILE_SHARED
    )
    count = ctypes.c_uint(0)
    array = (pynvml.c_nvmlComputeInstance_t * 8)()
    pynvml.nvmlGpuInstanceGetComputeInstances(gi, ci_info.id, array, ctypes.byref(count))
    return [array[i] for i in range(count.value)]


def _mig_uuids(h: Any) -> dict[tuple[int, int], str]:
    """(GI id, CI id) → `MIG-…` UUID, walking the parent's MIG device handles."""
    found: dict[tuple[int, int], str] = {}
    for i in range(pynvml.nvmlDeviceGetMaxMigDeviceCount(h)):
        try:
            mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, i)
        except pynvml.NVMLError as e:
            if has_code(e, pynvml.NVML_ERROR_NOT_FOUND, pynvml.NVML_ERROR_INVALID_ARGUMENT):
                continue
            raise
        key = (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig))
        found[key] = text(pynvml.nvmlDeviceGetUUID(mig))
    return found
