"""The vgpu family's host part: each shared GPU's view, which GPUs the priority relay watches, and what the
burst arbiter arbitrates (arbiter.py).

Slots are chosen when a claim is planned and kept in its checkpoint entry (`GpuShare`,
dra_driver/core/families/
vgpu.py), so the schedule is a function of the checkpoint: after every prepare, unprepare and start-up the
views are written again from it (dra_driver/core/sm_schedule.py decides the parts). The views live in one
directory per GPU (`PluginPaths.gpus_dir`), which every vgpu container on that GPU mounts read-only; only this
daemon writes them. A refresh writes the strict partition and wakes the arbiter and the relay (asleep while
they have nothing to watch: pacing.py), and the arbiter lays the frame out for the claims with work on its
next round.

Two instances on one node (a rolling update) share the views. Refreshes run under the checkpoint lock from
the save on disk (`NodeState.commit`); the loops run in one instance only (`Running.leads`), and each of
their writes happens inside `Running.deriving`, which first refreshes this part from another instance's save,
so no write leaves out a claim another instance prepared (docs/architecture.md, "Two instances on one node").
"""

from __future__ import annotations

import contextlib
import threading
from collections import defaultdict
from collections.abc import Callable, Iterable, Iterator, Sequence
from contextlib import AbstractContextManager
from pathlib import Path
from typing import Any, Never

import structlog

from dra_driver.core.allocation import ClaimPlan
from dra_driver.core.families.base import PlannedDevice
from dra_driver.core.families.capacity import SharedLimits
from dra_driver.core.families.vgpu import FAMILY, NAME, GpuShare
from dra_driver.core.sm_schedule import DEFAULT_FRAME_US, SharingClaim, partition
from dra_driver.libtessera.names import SHARED_DIR_NAME, VIEW_FILE_NAME
from dra_driver.libtessera.view_layout import Part
from dra_driver.vocabulary.errors import StorageError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.host_parts.base import Created, FamilyHost, HostContext, Loop, Running
from kubelet_plugin.host_parts.vgpu import arbiter, priority_relay
from kubelet_plugin.host_parts.vgpu.arbiter import Arbiter, ArbitratedGpu
from kubelet_plugin.host_parts.vgpu.priority_relay import LaunchEvidence, RelayedGpu
from kubelet_plugin.library_files.gpu_view import GpuView
from kubelet_plugin.node.file_modes import make_dir
from kubelet_plugin.record.checkpoint import Checkpoint

GPUS_ROOT_MODE = 0o700  # containers get a GPU's view directory by bind mount, never through this root
GPU_VIEW_DIR_MODE = 0o755  # mounted read-only into every vgpu container on the GPU

log = structlog.get_logger(__name__)


class GpuSharing(FamilyHost[SharedLimits, GpuShare, Never]):
    """The views of the node's shared GPUs (thread-safe: prepare, unprepare and the relay all use it)."""

    def __init__(self, *, gpus_dir: Path, claims_dir: Path, frame_us: int = DEFAULT_FRAME_US) -> None:
        super().__init__(NAME)
        self._root = gpus_dir
        self._claims_dir = claims_dir
        self._frame_us = frame_us
        self._views: dict[GpuUUID, GpuView] = {}
        self._relayed: tuple[RelayedGpu, ...] = ()
        self._arbitrated: tuple[ArbitratedGpu, ...] = ()
        self._arbiter = Arbiter()
        self._evidence = LaunchEvidence()  # the relay's
        # set after every refresh (and when the daemon stops): the loops sleep on them while idle (pacing.py)
        self._arbiter_wake = threading.Event()
        self._relay_wake = threading.Event()
        self._elsewhere = 0  # refreshes from another instance's save so far
        self._lock = threading.Lock()
        # until the daemon's loops start (and in tests of this part alone): alone on the node
        self._leads: Callable[[], bool] = lambda: True
        self._deriving: Callable[[], AbstractContextManager[bool]] = priority_relay.unguarded

    def view_dir(self, gpu: GpuUUID) -> Path:
        return self._root / gpu

    def _view(self, gpu: GpuUUID) -> GpuView:
        view = self._views.get(gpu)
        if view is None:
            make_dir(self._root, GPUS_ROOT_MODE)
            make_dir(self.view_dir(gpu), GPU_VIEW_DIR_MODE)
            view = self._views[gpu] = GpuView(self.view_dir(gpu) / VIEW_FILE_NAME)
        return view

    def ensure(self, gpus: Iterable[GpuUUID]) -> None:
        """Create the views a claim about to be prepared will mount (an empty schedule until refresh)."""
        with self._lock:
            for gpu in gpus:
                self._view(gpu)

    def create(
        self,
        *,
        plan: ClaimPlan,
        devices: Sequence[PlannedDevice[Any, SharedLimits]],
        records: tuple[GpuShare, ...],
        snapshot: Inventory,
    ) -> Created[GpuShare, Never]:
        self.ensure(r.gpu_uuid for r in records)
        return Created(records=records)

    def refresh(self, cp: Checkpoint) -> None:
        """Write the strict partition of every shared GPU whose claims changed, from the checkpoint (a GPU
        whose last claim left keeps an empty one); the arbiter lays it out for the claims with work next. A
        view that cannot be written is logged: the claims on that GPU then run on their buckets."""
        by_gpu: dict[GpuUUID, list[tuple[str, GpuShare]]] = defaultdict(list)
        for entry in cp.claims.values():
            for share in entry.family_records(FAMILY):
                by_gpu[share.gpu_uuid].append((entry.uid, share))
        relayed, arbitrated = [], []
        with self._lock:
            before = {g.uuid: g for g in self._arbitrated}
            for gpu in sorted(set(by_gpu) | set(self._views)):
                members = by_gpu.get(gpu, [])
                claims = tuple(SharingClaim(s.slot, s.cores, s.high_priority, s.ceiling) for _, s in members)
                dirs = tuple(self._claims_dir / uid / SHARED_DIR_NAME for uid, _ in members)
                kept = before.get(gpu)
                if (
                    kept is not None
                    and (kept.claims, kept.claim_dirs) == (claims, dirs)
                    and gpu in self._views
                ):
                    # its claims did not change: the arbiter's layout stands
                    arbitrated.append(kept)
                    relayed.extend(self._relay(gpu, members))
                    continue
                try:
                    self._view(gpu).write_schedule(
                        partition(claims, frame_us=self._frame_us), frame_us=self._frame_us
                    )
                except StorageError as e:
                    log.error("GPU view not written", gpu=gpu, error=str(e))
                    continue
                self._arbiter.forget(gpu)
                if claims:
                    arbitrated.append(ArbitratedGpu(gpu, self._views[gpu], claims, dirs, self._frame_us))
                relayed.extend(self._relay(gpu, members))
            self._relayed = tuple(relayed)
            self._arbitrated = tuple(arbitrated)
        self._wake()

    def _wake(self) -> None:
        """Wake both loops (after this part's GPUs or their claims may have changed, and when the daemon
        stops): each looks again at once, polling if it has something to watch."""
        self._arbiter_wake.set()
        self._relay_wake.set()

    def _relay(self, gpu: GpuUUID, members: Sequence[tuple[str, GpuShare]]) -> list[RelayedGpu]:
        high = tuple(self._claims_dir / uid / SHARED_DIR_NAME for uid, s in members if s.high_priority)
        return [RelayedGpu(gpu, self._views[gpu], high)] if high else []

    def changed_elsewhere(self) -> None:
        # the other instance's refresh may have written the strict partition over the arbiter's layouts
        with self._lock:
            self._elsewhere += 1
            for g in self._arbitrated:
                self._arbiter.forget(g.uuid)

    def loops(self, running: Running) -> tuple[Loop, ...]:
        # the relay holds normal claims back while a high-priority one on their GPU has work; the arbiter
        # gives the time of idle claims to the claims with work. Both poll only while they have something
        # to watch, and sleep otherwise until a refresh (or the daemon's stop) wakes them.
        self._leads, self._deriving = running.leads, running.deriving
        return (
            Loop(
                "priority-relay",
                lambda stop: priority_relay.run(
                    stop,
                    self.relayed,
                    writing=self._relay_writing,
                    evidence=self._evidence,
                    wake=self._relay_wake,
                ),
                wake=self._wake,
            ),
            Loop("burst-arbiter", self._arbitrate, wake=self._wake),
        )

    @contextlib.contextmanager
    def _writing(self) -> Iterator[bool]:
        """Whether a loop may write the views now: it runs in the instance that leads, and the views derive
        from the save on disk (refreshed first if another instance made it)."""
        if not self._leads():
            yield False
            return
        with self._deriving() as current:
            yield current

    @contextlib.contextmanager
    def _relay_writing(self) -> Iterator[bool]:
        # no GPU with a high-priority claim (the usual case): no hold to write, no lock to take; the arbiter's
        # rounds (every POLL while GPUs are shared, else every pacing.FALLBACK_S) catch this part up with the
        # other instance's saves
        if not self._relayed:
            yield False
            return
        with self._writing() as may:
            yield may

    def _arbitrate(self, stop: threading.Event) -> None:
        arbiter.run(stop, self.arbitrated, self._arbiter, self.commit_layout, wake=self._arbiter_wake)

    def arbitrate_once(self, *, now_ns: int) -> None:
        """One round of the burst arbiter (its loop's)."""
        self._arbiter.round(self.arbitrated(), now_ns=now_ns, commit=self.commit_layout)

    def relay_once(self, *, now_ns: int) -> None:
        """One round of the priority relay (its loop's)."""
        priority_relay.relay_round(self.relayed, self._evidence, now_ns=now_ns, writing=self._relay_writing)

    def arbitrated(self) -> Sequence[ArbitratedGpu]:
        """The shared GPUs and their claims, for the burst arbiter: as the save on disk has them, and none
        while another instance runs the loops."""
        with self._writing() as may:
            return self._arbitrated if may else ()

    def commit_layout(self, g: ArbitratedGpu, parts: tuple[Part, ...]) -> bool:
        """Writes the arbiter's layout, unless a refresh (of this instance's save or another's) changed the
        GPU's claims since the arbiter read them: the next round lays it out for the claims it has now."""
        elsewhere = self._elsewhere
        with self._writing() as may, self._lock:
            if not may:
                return False
            if g not in self._arbitrated:
                # routine after this instance's own prepare; worth a warning when another instance's was
                stale = log.warning if self._elsewhere != elsewhere else log.debug
                stale("GPU view layout not written: the GPU's claims changed since it was made", gpu=g.uuid)
                return False
            try:
                g.view.write_schedule(parts, frame_us=g.frame_us)
            except (OSError, ValueError) as e:  # a closed or broken mapping: the partition stays
                log.error("GPU view not arbitrated", gpu=g.uuid, error=str(e))
                return False
            return True

    def relayed(self) -> Sequence[RelayedGpu]:
        """The GPUs with a high-priority claim, for the priority relay."""
        return self._relayed

    def close(self) -> None:
        with self._lock:
            for view in self._views.values():
                view.close()
            self._views.clear()
            self._relayed = ()
            self._arbitrated = ()


def make(ctx: HostContext) -> GpuSharing:
    return GpuSharing(gpus_dir=ctx.paths.gpus_dir, claims_dir=ctx.paths.claims_dir)
