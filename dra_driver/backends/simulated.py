"""A simulated node that behaves like NVML: MIG mode, placements, driver-assigned ids, persisted state.

The GPUs come from a node file (see `sim_node`); what changes at runtime (MIG mode, instances) lives in a
state file that every call re-reads under a lock, so two processes (a restarted daemon, a test) agree.
"""

from __future__ import annotations

import dataclasses
import fcntl
import threading
import uuid as uuidlib
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import TypeVar

import structlog

from dra_driver.backends.sim_node import SimGpu, SimulatedNode, admin_mig_uuid, load_node
from dra_driver.backends.sim_state import (
    SimGpuState,
    SimInstance,
    SimState,
    read_state,
    write_state,
)
from dra_driver.core.profiles import GpuProduct
from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.errors import InventoryError, MigError, PlacementTakenError
from dra_driver.vocabulary.inventory import Gpu, GpuFault, Inventory, MigInstance, MigProfile
from dra_driver.vocabulary.names import GpuUUID

NVIDIA_MAJOR = 195
NVIDIACTL_MINOR = 255
UVM_MAJOR = 510  # dynamic on a real host; a plausible value
CAPS_MAJOR = 237  # dynamic on a real host (the `nvidia-caps` line of /proc/devices)
FIRST_CAP_MINOR = 3  # nvidia-cap1/2 are the MIG config and monitor capabilities

T = TypeVar("T")
log = structlog.get_logger(__name__)


def control_nodes() -> tuple[DeviceNode, ...]:
    return (
        DeviceNode("/dev/nvidiactl", NVIDIA_MAJOR, NVIDIACTL_MINOR),
        DeviceNode("/dev/nvidia-uvm", UVM_MAJOR, 0),
        DeviceNode("/dev/nvidia-uvm-tools", UVM_MAJOR, 1),
    )


def cap_node(minor: int) -> DeviceNode:
    return DeviceNode(f"/dev/nvidia-caps/nvidia-cap{minor}", CAPS_MAJOR, minor)


def _lowest_free(used: set[int], start: int) -> int:
    n = start
    while n in used:
        n += 1
    return n


def _mig_value(g: SimGpu, i: SimInstance) -> MigInstance:
    prof = g.product.profile_by_id(i.profile_id)
    return MigInstance(
        parent_uuid=g.uuid,
        profile_id=i.profile_id,
        profile_name=prof.name if prof else f"profile-{i.profile_id}",
        start=i.start,
        size=prof.memory_slices if prof else 1,
        gi_id=i.gi_id,
        ci_id=i.ci_id,
        uuid=i.uuid,
        device_nodes=(cap_node(i.gi_cap_minor), cap_node(i.ci_cap_minor)),
    )


def _hardware(p: GpuProduct) -> dict[str, int]:
    return {
        "multiprocessors": p.multiprocessors,
        "copy engines": p.copy_engines,
        "decoders": p.decoders,
        "encoders": p.encoders,
        "JPEG engines": p.jpeg_engines,
        "OFA engines": p.ofa_engines,
    }


def _engines(prof: MigProfile | None) -> dict[str, int]:
    """What an instance holds of the GPU's hardware; together they never hold more than exists."""
    if prof is None:
        return dict.fromkeys(
            ("multiprocessors", "copy engines", "decoders", "encoders", "JPEG engines", "OFA engines"), 0
        )
    return {
        "multiprocessors": prof.multiprocessors,
        "copy engines": prof.copy_engines,
        "decoders": prof.decoders,
        "encoders": prof.encoders,
        "JPEG engines": prof.jpeg_engines,
        "OFA engines": prof.ofa_engines,
    }


def initial_state(node: SimulatedNode) -> SimState:
    """The state before anything ran: MIG mode and the administrator's instances from the node file."""
    state = SimState(gpus={g.uuid: SimGpuState(mig_enabled=g.mig_enabled) for g in node.gpus})
    for g in node.gpus:
        for inst in g.admin_instances:
            state = _with_new_instance(
                state, g, inst.profile_id, inst.start, admin_mig_uuid(node.seed, g.uuid, inst.start)
            )
    return state


def _with_new_instance(state: SimState, gpu: SimGpu, profile_id: int, start: int, mig_uuid: str) -> SimState:
    """The state with one more instance, checked the way the driver checks it."""
    current = state.of(gpu.uuid)
    if not current.mig_enabled:
        raise MigError(
            f"GPU {gpu.uuid} (index {gpu.index}): MIG mode is off; enable it before creating instances"
        )
    prof = gpu.product.profile_by_id(profile_id)
    if prof is None:
        raise MigError(f"GPU {gpu.uuid}: {gpu.product.key} has no MIG profile id {profile_id}")
    if start not in prof.placement_starts:
        raise MigError(
            f"GPU {gpu.uuid}: {start} is not a placement of {prof.name}; valid: {list(prof.placement_starts)}"
        )
    wanted = set(range(start, start + prof.memory_slices))
    for other in current.instances:
        other_prof = gpu.product.profile_by_id(other.profile_id)
        size = other_prof.memory_slices if other_prof else 1
        if wanted & set(range(other.start, other.start + size)):
            raise PlacementTakenError(
                f"GPU {gpu.uuid}: placement {prof.name}@{start} overlaps GPU instance {other.gi_id} "
                f"at {other.start} (size {size})"
            )
    if sum(1 for i in current.instances if i.profile_id == profile_id) >= prof.max_instances:
        raise MigError(
            f"GPU {gpu.uuid}: already {prof.max_instances} instance(s) of {prof.name}, the maximum"
        )
    for resource, limit in _hardware(gpu.product).items():
        used = sum(_engines(gpu.product.profile_by_id(i.profile_id))[resource] for i in current.instances)
        if used + _engines(prof)[resource] > limit:
            raise MigError(f"GPU {gpu.uuid}: no {resource} left for {prof.name} ({used} of {limit} in use)")
    gi_id = _lowest_free({i.gi_id for i in current.instances}, 1)
    used_minors = state.used_cap_minors()
    gi_minor = _lowest_free(used_minors, FIRST_CAP_MINOR)
    ci_minor = _lowest_free(used_minors | {gi_minor}, FIRST_CAP_MINOR)
    created = SimInstance(
        profile_id=profile_id,
        start=start,
        gi_id=gi_id,
        ci_id=0,
        uuid=mig_uuid,
        gi_cap_minor=gi_minor,
        ci_cap_minor=ci_minor,
    )
    return state.with_gpu(
        gpu.uuid, dataclasses.replace(current, mig_enabled=True, instances=(*current.instances, created))
    )


class SimulatedBackend:
    """`GpuBackend` over a simulated node. With `state_file=None` the state lives in memory only."""

    def __init__(self, *, node: SimulatedNode, state_file: Path | None) -> None:
        self._node = node
        self._state_file = state_file
        self._lock = threading.Lock()
        self._memory_state = initial_state(node)
        with self._locked():
            self._save(self._load())  # a fresh node gets its state file at once

    @classmethod
    def from_file(cls, *, node_file: Path, state_file: Path | None) -> SimulatedBackend:
        return cls(node=load_node(node_file), state_file=state_file)

    @property
    def node(self) -> SimulatedNode:
        return self._node

    # -- state plumbing ---------------------------------------------------------------------------

    @contextmanager
    def _locked(self) -> Iterator[None]:
        with self._lock:
            if self._state_file is None:
                yield
                return
            lock_path = self._state_file.with_name(f".{self._state_file.name}.lock")
            lock_path.parent.mkdir(parents=True, exist_ok=True)
            with open(lock_path, "a") as lock:
                fcntl.flock(lock.fileno(), fcntl.LOCK_EX)
                yield

    def _load(self) -> SimState:
        if self._state_file is None:
            return self._memory_state
        saved = read_state(self._state_file)
        if saved is None:
            return initial_state(self._node)
        unknown = sorted(set(saved.gpus) - {g.uuid for g in self._node.gpus})
        if unknown:
            raise InventoryError(
                f"simulated GPU state {self._state_file} names GPU {unknown[0]} that the node file lacks; "
                "delete the state file or use the node file it was made for"
            )
        # GPUs added to the node file since start with their initial state.
        fresh = initial_state(self._node)
        return SimState(gpus={g.uuid: saved.gpus.get(g.uuid, fresh.of(g.uuid)) for g in self._node.gpus})

    def _save(self, state: SimState) -> None:
        self._memory_state = state
        if self._state_file is not None:
            write_state(self._state_file, state)

    def _mutate(self, change: Callable[[SimState], tuple[SimState, T]]) -> T:
        with self._locked():
            before = self._load()
            after, result = change(before)
            if after is not before:
                self._save(after)
            return result

    def _gpu(self, uuid: GpuUUID) -> SimGpu:
        gpu = self._node.gpu(uuid)
        if gpu is None:
            raise InventoryError(f"no GPU {uuid} on simulated node {self._node.node_name}")
        return gpu

    # -- GpuBackend --------------------------------------------------------------------------------

    def inventory(self) -> Inventory:
        with self._locked():
            state = self._load()
        return Inventory(
            driver_version=self._node.driver_version,
            cuda_driver_version=self._node.cuda_driver_version,
            gpus=tuple(self._gpu_value(g, state.of(g.uuid)) for g in self._node.gpus),
            control_nodes=control_nodes(),
            host_memory_bytes=self._node.host_memory_gib << 30,
        )

    def _gpu_value(self, g: SimGpu, state: SimGpuState) -> Gpu:
        p = g.product
        instances = [_mig_value(g, i) for i in state.instances]
        return Gpu(
            index=g.index,
            uuid=g.uuid,
            product_name=p.product_name,
            brand="Nvidia",
            architecture=p.architecture,
            cuda_compute_capability=p.cuda_compute_capability,
            memory_bytes=p.memory_bytes,
            multiprocessors=p.multiprocessors,
            pci_bus_id=g.pci_bus_id,
            device_node=DeviceNode(f"/dev/nvidia{g.index}", NVIDIA_MAJOR, g.index),
            mig_capable=p.mig_capable,
            mig_enabled=state.mig_enabled,
            memory_slice_count=p.memory_slice_count,
            copy_engines=p.copy_engines,
            decoders=p.decoders,
            encoders=p.encoders,
            jpeg_engines=p.jpeg_engines,
            ofa_engines=p.ofa_engines,
            mig_profiles=p.mig_profiles,
            mig_instances=tuple(sorted(instances, key=lambda m: m.start)),
            healthy=g.healthy,
            faults=state.faults,
            pcie_root=g.pcie_root,
            numa_node=g.numa_node,
            nvlinks=g.nvlinks,
            fabric=g.fabric,
        )

    def set_mig_mode(self, *, gpu: GpuUUID, enabled: bool) -> None:
        g = self._gpu(gpu)

        def change(state: SimState) -> tuple[SimState, None]:
            current = state.of(gpu)
            if current.mig_enabled == enabled:
                return state, None
            if not g.product.mig_capable:
                raise MigError(f"GPU {gpu} ({g.product.key}) is not MIG-capable")
            if not g.product.architecture.can_toggle_mig_without_reset:
                raise MigError(
                    f"GPU {gpu} ({g.product.key}, {g.product.architecture}) needs a GPU reset to change "
                    "MIG mode; an administrator must do it"
                )
            if not enabled and current.instances:
                raise MigError(
                    f"GPU {gpu}: cannot disable MIG mode while {len(current.instances)} instance(s) exist"
                )
            return state.with_gpu(gpu, dataclasses.replace(current, mig_enabled=enabled)), None

        self._mutate(change)
        log.info("sim.mig_mode", gpu=gpu, enabled=enabled)

    def create_mig_instance(self, *, gpu: GpuUUID, profile_id: int, start: int) -> MigInstance:
        g = self._gpu(gpu)

        def change(state: SimState) -> tuple[SimState, SimInstance]:
            after = _with_new_instance(state, g, profile_id, start, f"MIG-{uuidlib.uuid4()}")
            return after, after.of(gpu).instances[-1]

        created = _mig_value(g, self._mutate(change))
        log.info("sim.mig_created", gpu=gpu, profile=created.profile_name, start=start, gi=created.gi_id)
        return created

    def destroy_mig_instance(self, *, gpu: GpuUUID, gi_id: int) -> None:
        self._gpu(gpu)

        def change(state: SimState) -> tuple[SimState, bool]:
            current = state.of(gpu)
            kept = tuple(i for i in current.instances if i.gi_id != gi_id)
            if len(kept) == len(current.instances):
                return state, False
            return state.with_gpu(gpu, dataclasses.replace(current, instances=kept)), True

        if self._mutate(change):
            log.info("sim.mig_destroyed", gpu=gpu, gi=gi_id)

    # -- faults injected from outside (`tessera sim inject`) -------------------------------------------

    def gpu_by_index(self, index: int) -> SimGpu:
        gpu = next((g for g in self._node.gpus if g.index == index), None)
        if gpu is None:
            known = ", ".join(str(g.index) for g in self._node.gpus)
            raise InventoryError(f"--gpu {index}: simulated node {self._node.node_name} has GPUs {known}")
        return gpu

    def inject_fault(self, *, gpu: GpuUUID, fault: GpuFault) -> None:
        """The GPU reports `fault` from now on (a running daemon's health loop reads it at its next check)."""
        self._gpu(gpu)

        def change(state: SimState) -> tuple[SimState, None]:
            current = state.of(gpu)
            if fault in current.faults:
                return state, None
            return state.with_gpu(gpu, dataclasses.replace(current, faults=(*current.faults, fault))), None

        self._mutate(change)
        log.info("sim.fault_injected", gpu=gpu, kind=fault.kind.value, xid=fault.xid)

    def clear_faults(self, *, gpu: GpuUUID) -> int:
        """The GPU recovers (as after a reset): it reports no fault any more; how many were cleared."""
        self._gpu(gpu)

        def change(state: SimState) -> tuple[SimState, int]:
            current = state.of(gpu)
            if not current.faults:
                return state, 0
            return state.with_gpu(gpu, dataclasses.replace(current, faults=())), len(current.faults)

        cleared = self._mutate(change)
        log.info("sim.faults_cleared", gpu=gpu, cleared=cleared)
        return cleared

    def close(self) -> None:
        """Nothing to release: every call already persisted its change."""
