"""The node's state as prepare, unprepare, start-up reconciliation and the publisher share it.

It holds the checkpoint (memory never runs ahead of disk), the claims' files (CDI specs, claim directories)
and the families' host parts, behind one lock. Every change of the checkpoint goes through `commit`, which
says whether the write must survive a power loss (`durable`): only a write ahead of a node-wide change that
outlives a reboot (MIG mode) must be; everything else a restart finds and settles again (docs/
architecture.md, "Durability").
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass

import structlog

from cdi.writer import read_spec, remove_spec
from dra_driver.backends.base import GpuBackend
from dra_driver.core import families
from dra_driver.core.allocation import NodeHolds
from dra_driver.system.driver_root import DriverRoot
from dra_driver.system.safe_tree import is_plain_file
from dra_driver.values.errors import StorageError
from dra_driver.values.model import Inventory, Placement
from dra_driver.values.names import LIMITS_FILE_NAME, ClaimUID, Family
from kubelet_plugin.claims.claimdir import ClaimDirs
from kubelet_plugin.hosts import Hosts
from kubelet_plugin.hosts.base import HostContext, Removed
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, OfferKey
from kubelet_plugin.record.checkpoint_store import CheckpointStore, read_boot_id
from kubelet_plugin.record.steps import NO_OBSERVER, Step, StepObserver

log = structlog.get_logger(__name__)


@dataclass(frozen=True, slots=True)
class Commits:
    """How many checkpoint writes this state made, and how many of them were durable."""

    total: int = 0
    durable: int = 0


class NodeState:
    def __init__(
        self,
        *,
        backend: GpuBackend,
        paths: PluginPaths,
        steps: StepObserver = NO_OBSERVER,
        host_options: Mapping[str, str] | None = None,
        driver_root: DriverRoot | None = None,
        boot_id: str | None = None,
    ) -> None:
        self.backend = backend
        self.paths = paths
        self.steps = steps  # told as a claim passes each step (a test harness may stop the process there)
        self.boot_id = boot_id if boot_id is not None else read_boot_id()
        self.dirs = ClaimDirs(root=paths.claims_dir)
        context = HostContext(
            backend=backend,
            paths=paths,
            steps=steps,
            options=dict(host_options or {}),
            driver_root=driver_root,
        )
        self.hosts = Hosts(context)
        self.lock = threading.RLock()
        self.store = CheckpointStore(path=paths.checkpoint_file)
        self._cp: Checkpoint | None = None
        self.commits = Commits()

    # ---- the checkpoint ---------------------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """The current checkpoint (loaded on first use; a corrupt file raises StorageError)."""
        if self._cp is None:
            self._cp = self.store.load(boot_id=self.boot_id)
        return self._cp

    def commit(self, cp: Checkpoint, *, durable: bool = False) -> Checkpoint:
        """Save (durably if asked), then adopt and let the host parts rewrite what derives from it."""
        self.store.save(cp, durable=durable)
        self._cp = cp
        self.commits = Commits(self.commits.total + 1, self.commits.durable + int(durable))
        for host in self.hosts:
            host.refresh(cp)
        return cp

    def forget(self) -> None:
        """Read the checkpoint from disk again next time (another instance may have changed it)."""
        self._cp = None

    def holds(
        self, uid: ClaimUID, *, also: Mapping[Family, Sequence[object]] | None = None, own: bool = True
    ) -> NodeHolds:
        """What every family records: the claim's own (unless `own` is false), and everyone else's plus
        `also` (what this call planned for other claims already)."""
        cp = self.checkpoint()
        entry = cp.entry(uid) if own else None
        extra = also or {}
        return NodeHolds(
            claim={f.name: entry.of(f.name) for f in families.FAMILIES} if entry is not None else {},
            others={
                f.name: cp.records(f.name, excluding=uid) + tuple(extra.get(f.name, ()))
                for f in families.FAMILIES
            },
        )

    def placements(self) -> frozenset[Placement]:
        """MIG placements Tessera holds, read from disk (for the publisher: another thread or instance writes
        the checkpoint)."""
        return self.store.load(boot_id="").placements()

    def offer_key(self) -> OfferKey:
        """`Checkpoint.offer_key`, read from disk like `placements`."""
        return self.store.load(boot_id="").offer_key()

    # ---- a claim's artifacts ------------------------------------------------------------------------------

    def files_problem(self, entry: ClaimEntry, *, inventory: Inventory | None = None) -> str | None:
        """Why a prepared claim's files cannot be served as they are (None: they can).

        The CDI spec must be a regular file that parses and holds exactly the devices answered to the kubelet;
        a claim directory must hold its limits file; with an inventory, the host parts check theirs too.
        """
        try:
            spec = read_spec(self.paths.cdi_spec_file(entry.uid))
        except StorageError as e:
            return str(e)
        answered = {i for d in entry.devices for i in d.cdi_device_ids}
        if set(spec.qualified_names()) != answered:
            return f"CDI spec {self.paths.cdi_spec_file(entry.uid)} lists other devices than were prepared"
        if entry.has_claim_dir and not (
            is_plain_file(self.dirs.path(entry.uid) / LIMITS_FILE_NAME)
            and is_plain_file(self.dirs.shared(entry.uid) / LIMITS_FILE_NAME)  # the read-only mount's point
        ):
            return f"claim directory {self.dirs.path(entry.uid)} or its limits file is missing"
        if inventory is not None:
            for host in self.hosts:
                problem = host.damage(entry, inventory=inventory)
                if problem is not None:
                    return problem
        return None

    def teardown(self, entry: ClaimEntry) -> Removed:
        """Remove everything the entry's claim may have left: CDI spec, what its families created, claim dir.

        Idempotent: a thing already gone is skipped. The checkpoint entry itself is the caller's to drop.
        """
        files = Removed()
        if remove_spec(self.paths.cdi_dir, entry.uid):
            files.cdi_files.append(str(self.paths.cdi_spec_file(entry.uid)))
        self.steps.reached(Step.UNPREPARE_AFTER_CDI_REMOVE, entry.uid)
        parts = [files, *(host.teardown(entry) for host in self.hosts)]
        if self.dirs.remove(entry.uid):
            parts.append(Removed(claim_dirs=[str(self.dirs.path(entry.uid))]))
        self.steps.reached(Step.UNPREPARE_AFTER_CLAIMDIR_REMOVE, entry.uid)
        return merged(parts)

    def settle(self, cp: Checkpoint, *, leaving: Collection[ClaimUID]) -> tuple[Checkpoint, Removed]:
        """Undo node-wide state (MIG mode, ...) no claim but `leaving` needs; returns the checkpoint to
        commit next."""
        parts = []
        for host in self.hosts:
            cp, went = host.settle(cp, leaving=leaving)
            parts.append(went)
        return cp, merged(parts)

    def close(self) -> None:
        self.hosts.close()


def merged(parts: Iterable[Removed]) -> Removed:
    out = Removed()
    for p in parts:
        out.cdi_files += p.cdi_files
        out.claim_dirs += p.claim_dirs
        out.host += p.host
    return out
