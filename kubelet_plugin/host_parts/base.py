"""A family's host part: what it creates on the node for a claim, tears down, checks, and settles node-wide.

The pure family (dra_driver/core/families) plans and records; its host part acts: MIG instances and MIG mode,
a GPU's sharing view, an MPS control daemon, and the loops that watch them while the daemon serves.
Families that create nothing have no host part (`NoHost`).
docs/architecture.md, "The family seam".
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Callable, Collection, Mapping, Sequence
from contextlib import AbstractContextManager
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Generic

from dra_driver.backends.base import GpuBackend
from dra_driver.core.allocation import ClaimPlan
from dra_driver.core.families.base import MadeT, PlannedDevice, RecordT, SpecT
from dra_driver.io.driver_root import DriverRoot
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import ClaimUID, DeviceName, Family, GpuUUID
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry
from kubelet_plugin.record.leftovers import Leftover
from kubelet_plugin.record.steps import StepObserver


@dataclass(frozen=True, slots=True)
class HostOption:
    """A command-line flag a host part owns (`--mps-dir`): the node daemon and `tessera cleanup` take it,
    and the part reads the value given from `HostContext.options`, by `dest`."""

    flag: str
    metavar: str
    help: str

    @property
    def dest(self) -> str:
        return self.flag.removeprefix("--").replace("-", "_")


@dataclass(frozen=True, slots=True)
class HostContext:
    """What host parts act through."""

    backend: GpuBackend
    paths: PluginPaths
    steps: StepObserver
    options: Mapping[str, str] = field(default_factory=dict)  # the host parts' flags given, by `dest`
    driver_root: DriverRoot | None = None  # the NVIDIA driver's files (--driver-root; None: none given)


@dataclass(frozen=True, slots=True)
class Created(Generic[RecordT, MadeT]):
    records: tuple[RecordT, ...]  # the family's records for the claim once created (ids filled in)
    made: Mapping[DeviceName, MadeT] = field(default_factory=dict)  # per device, what its CDI edits need


@dataclass(slots=True)
class Removed:
    """What teardowns and settling removed, for the log and the reconcile report."""

    cdi_files: list[str] = field(default_factory=list)
    claim_dirs: list[str] = field(default_factory=list)
    host: list[Leftover] = field(default_factory=list)  # what the host parts took down, whatever their family


def _unguarded() -> AbstractContextManager[bool]:
    return contextlib.nullcontext(True)


def _alone() -> bool:
    return True


def _nothing() -> None:
    pass


@dataclass(frozen=True, slots=True)
class Running:
    """What a host part's background loops act through while the daemon serves. Another instance may share
    the node (a rolling update): a loop that writes a node-wide file derived from the checkpoint writes only
    while `leads()` and inside `deriving()` (docs/architecture.md, "Two instances on one node")."""

    checkpoint: Callable[[], Checkpoint | None]  # the node's checkpoint now (None: unreadable just now)
    exclusive: Callable[[], AbstractContextManager[None]]  # the plugin's file lock and the node's lock, held
    warn: Callable[..., object] | None = None  # a Warning Event on the Node (reason=, message=)
    # the checkpoint lock held, every host part refreshed from the save on disk if another instance made it
    # (False: unreadable just now, write nothing); `NodeState.deriving`
    deriving: Callable[[], AbstractContextManager[bool]] = _unguarded
    leads: Callable[[], bool] = _alone  # whether this instance runs the node's writing loops (one at a time)


@dataclass(frozen=True, slots=True)
class Loop:
    """A host part's background loop: the daemon runs `run(stop)` in a thread named `name` until `stop`, and
    calls `wake` right after it sets `stop`, so that a loop asleep on an event of its own ends at once."""

    name: str
    run: Callable[[threading.Event], None]
    wake: Callable[[], None] = _nothing


class FamilyHost(Generic[SpecT, RecordT, MadeT]):
    """The default host part: nothing on the host. Subclasses override what their family needs, typed by
    the family's plan, record and made types (dra_driver/core/families/base.py)."""

    family: Family

    def __init__(self, family: Family) -> None:
        self.family = family

    def write_ahead(self, devices: Sequence[PlannedDevice[Any, SpecT]]) -> bool:
        """Whether the claim's records must be on disk before `create` runs (to tell ours from an admin's)."""
        return False

    def will_own(self, devices: Sequence[PlannedDevice[Any, SpecT]]) -> frozenset[GpuUUID]:
        """GPUs whose node-wide state `create` is about to change (recorded ahead, restored by `settle`)."""
        return frozenset()

    def create(
        self,
        *,
        plan: ClaimPlan,
        devices: Sequence[PlannedDevice[Any, SpecT]],
        records: tuple[RecordT, ...],
        snapshot: Inventory,
    ) -> Created[RecordT, MadeT]:
        """Create (or, rolling forward, find again) what the claim's devices need. Idempotent."""
        return Created(records=records)

    def teardown(self, entry: ClaimEntry) -> Removed:
        """Remove what the claim's records say this family created for it; what went. Idempotent."""
        return Removed()

    def damage(self, entry: ClaimEntry, *, inventory: Inventory | None) -> str | None:
        """Why a prepared claim's host artifacts are not as recorded (None: they are, or cannot be told)."""
        return None

    def recovered(self, entry: ClaimEntry, *, inventory: Inventory) -> tuple[ClaimEntry, frozenset[str]]:
        """A claim's entry rebuilt from its CDI spec's marker, as far as the live node bears it out, and the
        things (MIG instances) it no longer accounts for."""
        return entry, frozenset()

    def settle(self, cp: Checkpoint, *, leaving: Collection[ClaimUID]) -> tuple[Checkpoint, Removed]:
        """After claims leave (and at start-up): undo node-wide state no remaining claim needs; the checkpoint
        to commit next, and what went. A failure is a TesseraError whose message says what was being undone
        (callers report it as it is)."""
        return cp, Removed()

    def state_dirs(self) -> tuple[Path, ...]:
        """The host directories this part keeps (cleanup removes them once empty)."""
        return ()

    def on_host(self) -> tuple[Leftover, ...]:
        """What this part has running on the node that cleanup takes down (the MPS control daemons)."""
        return ()

    def take_down(self, item: Leftover) -> bool | None:
        """Take down an item of `on_host`: True if it went, False if it was gone; None: not this part's."""
        return None

    def refresh(self, cp: Checkpoint) -> None:
        """After every change of the checkpoint: rewrite what is derived from it (views)."""

    def changed_elsewhere(self) -> None:
        """Another instance on the node saved the checkpoint, and may have rewritten what derives from it,
        since this part's last `refresh`; a `refresh` follows at once."""

    def loops(self, running: Running) -> tuple[Loop, ...]:
        """The background loops this part runs while the daemon serves (the MPS watch, the priority relay)."""
        return ()

    def close(self) -> None:
        """The daemon stops."""


AnyHost = FamilyHost[Any, Any, Any]  # a host part of any family, as the daemon holds them
