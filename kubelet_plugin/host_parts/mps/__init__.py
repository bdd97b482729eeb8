"""The MPS family's host part: one MPS control daemon per GPU that MPS claims use (docs/mps.md).

A claim's prepare starts its GPU's daemon, or finds it running (a restarted node daemon adopts the daemons it
started: they run in sessions of their own), before the containers can start: a client that finds no daemon
would run without MPS. Settling stops the daemons of GPUs no MPS claim uses any more, after the last unprepare
and at start-up (with whatever leftover directories a killed daemon left). The daemons are driven through
`kubelet_plugin.host_parts.mps.control`.
"""

from __future__ import annotations

import contextlib
from collections.abc import Collection, Mapping, Sequence
from pathlib import Path
from typing import Any

import structlog

from dra_driver.core.allocation import ClaimPlan
from dra_driver.core.families.base import PlannedDevice
from dra_driver.core.families.capacity import SharedLimits
from dra_driver.core.families.mps import FAMILY, NAME, MpsClient, MpsPipe
from dra_driver.io.driver_root import NVML_SONAME, DriverRoot
from dra_driver.vocabulary.errors import MpsError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID, DeviceName, GpuUUID
from kubelet_plugin.host_parts.base import (
    Created,
    FamilyHost,
    HostContext,
    HostOption,
    Loop,
    Removed,
    Running,
)
from kubelet_plugin.host_parts.mps.control import DEFAULT_TOOL, MpsControl
from kubelet_plugin.host_parts.mps.watch import MpsWatch
from kubelet_plugin.node.host_launch import HostLauncher
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind

log = structlog.get_logger(__name__)


def _clients(entry: ClaimEntry) -> tuple[MpsClient, ...]:
    return entry.family_records(FAMILY)


def gpus_in_use(cp: Checkpoint, *, leaving: Collection[ClaimUID] = ()) -> set[GpuUUID]:
    """The GPUs whose control daemon the checkpoint's MPS claims (but those leaving) need."""
    return {c.gpu_uuid for e in cp.claims.values() if e.uid not in leaving for c in _clients(e)}


class MpsHost(FamilyHost[SharedLimits, MpsClient, MpsPipe]):
    def __init__(self, control: MpsControl) -> None:
        super().__init__(NAME)
        self.control = control
        self.watch: MpsWatch | None = None

    def loops(self, running: Running) -> tuple[Loop, ...]:
        def in_use() -> set[GpuUUID]:
            cp = running.checkpoint()
            return set() if cp is None else gpus_in_use(cp)  # unreadable: the next claim call rebuilds it

        # a daemon that died, went mute or was replaced is replaced, under both locks (never beside a prepare)
        self.watch = MpsWatch(control=self.control, in_use=in_use, lock=running.exclusive, warn=running.warn)
        return (Loop("mps-watch", self.watch.run),)

    def create(
        self,
        *,
        plan: ClaimPlan,
        devices: Sequence[PlannedDevice[Any, SharedLimits]],
        records: tuple[MpsClient, ...],
        snapshot: Inventory,
    ) -> Created[MpsClient, MpsPipe]:
        made: dict[DeviceName, MpsPipe] = {}
        for d in devices:
            daemon = self.control.ensure(gpu_uuid=d.gpu_uuid)
            if not daemon.adopted:
                log.info("MPS control daemon started", gpu=d.gpu_uuid, pid=daemon.pid, claim=plan.uid)
            made[d.device] = MpsPipe(host_dir=str(self.control.clients(d.gpu_uuid).link(plan.uid)))
        return Created(records=records, made=made)

    def teardown(self, entry: ClaimEntry) -> Removed:
        removed = Removed()
        for c in _clients(entry):
            with contextlib.suppress(MpsError):  # a GPU UUID no daemon directory can have: nothing was made
                clients = self.control.clients(c.gpu_uuid)
                if clients.remove(entry.uid):
                    removed.host.append(Leftover("MPS client directory", str(clients.path(entry.uid))))
        return removed

    def damage(self, entry: ClaimEntry, *, inventory: Inventory | None) -> str | None:
        wanted = {c.gpu_uuid for c in _clients(entry)}
        if not wanted:
            return None
        answering = {s.gpu_uuid for s in self.control.running() if s.answering}
        missing = sorted(wanted - answering)
        if missing:
            return f"the MPS control daemon of GPU {missing[0]} is not running"
        for gpu in sorted(wanted):
            if entry.uid in self.control.clients(gpu).stale():
                return f"the MPS client directory of GPU {gpu} does not lead to its control daemon"
        return None

    def state_dirs(self) -> tuple[Path, ...]:
        return (self.control.root,)

    def on_host(self) -> tuple[Leftover, ...]:
        """A GPU with a directory (and maybe a daemon) under the MPS directory."""
        return tuple(Leftover(LeftoverKind.MPS_DAEMON, s.gpu_uuid) for s in self.control.running())

    def take_down(self, item: Leftover) -> bool | None:
        if item.kind != LeftoverKind.MPS_DAEMON:
            return None
        return self.control.stop(gpu_uuid=GpuUUID(item.target))

    def settle(self, cp: Checkpoint, *, leaving: Collection[ClaimUID]) -> tuple[Checkpoint, Removed]:
        """Stop the daemons (and remove the directories) of GPUs no remaining MPS claim uses."""
        removed = Removed()
        in_use = gpus_in_use(cp, leaving=leaving)
        for state in self.control.running():
            if state.gpu_uuid in in_use:
                continue
            try:
                if self.control.stop(gpu_uuid=state.gpu_uuid):
                    removed.host.append(Leftover(LeftoverKind.MPS_DAEMON, state.gpu_uuid))
            except MpsError as e:
                log.error("MPS control daemon not stopped", gpu=state.gpu_uuid, error=str(e))
        return cp, removed


# ---- the flags it owns, and what they make -----------------------------------------------------------------

DIR_FLAG = HostOption(
    "--mps-dir",
    "DIR",
    "host directory of the MPS control daemons' pipes and logs, one per GPU (default: /var/lib/tessera/mps, "
    "or below --root); its socket paths must stay under 108 bytes",
)
CONTROL_FLAG = HostOption(
    "--mps-control",
    "PATH",
    f"the {DEFAULT_TOOL} that runs a GPU's MPS control daemon (default: the driver root's, else found on "
    "PATH)",
)
CGROUP_FLAG = HostOption(
    "--mps-host-cgroup",
    "CGROUP",
    "start MPS control daemons in the host's mount namespace and this cgroup (e.g. /tessera-mps), so they "
    "outlive the plugin's container; needs hostPID and a privileged container (the chart's)",
)
OPTIONS = (DIR_FLAG, CONTROL_FLAG, CGROUP_FLAG)


def default_dir(paths: PluginPaths) -> Path:
    return paths.family_dir(NAME)


def control_of(
    *, options: Mapping[str, str], driver_root: DriverRoot | None, paths: PluginPaths
) -> MpsControl:
    """The daemons' control as the flags and the driver root make it: the tool is --mps-control, else the
    driver root's, else found on PATH; with --mps-host-cgroup the daemons start on the host, where the driver
    root's tool runs by its host path, with the root's libraries on the loader's path where the root is not
    the host's own (the GPU Operator's)."""
    root = driver_root
    found = root.tool(DEFAULT_TOOL) if root is not None else None
    tool = options.get(CONTROL_FLAG.dest) or (
        str(root.visible_path(found)) if root is not None and found is not None else DEFAULT_TOOL
    )
    cgroup = options.get(CGROUP_FLAG.dest)
    launcher = None
    if cgroup:
        host_paths, env = {}, {}
        if root is not None:
            if found is not None:
                host_paths = {str(root.visible_path(found)): root.host_path(found)}
            nvml = root.library(NVML_SONAME)
            if str(root.host) != "/" and nvml is not None:
                env = {"LD_LIBRARY_PATH": root.host_path(nvml.parent)}
        launcher = HostLauncher(cgroup=cgroup, host_paths=host_paths, env=env)
    where = options.get(DIR_FLAG.dest)
    log.debug("MPS control", tool=tool, on_host=launcher is not None)
    return MpsControl(root=Path(where) if where else default_dir(paths), tool=tool, launcher=launcher)


def make(ctx: HostContext) -> MpsHost:
    return MpsHost(control_of(options=ctx.options, driver_root=ctx.driver_root, paths=ctx.paths))
