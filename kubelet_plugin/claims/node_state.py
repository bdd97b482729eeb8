"""The node's state as prepare, unprepare, start-up reconciliation and the publisher share it.

It holds the checkpoint (memory never runs ahead of disk), the claims' files (CDI specs, claim directories)
and the families' host parts, behind one lock. Every change of the checkpoint goes through `commit`, which
says whether the write must survive a power loss (`durable`): only a write ahead of a node-wide change that
outlives a reboot (MIG mode) must be; everything else a restart finds and settles again (docs/
architecture.md, "Durability").

Another instance may share the node (a rolling update) and save the checkpoint between two of this one's
calls. The host parts' node-wide files (the GPU views) are written from the checkpoint, so every such write
happens under the checkpoint lock, which every save takes too, and from the save on disk: `commit` saves
and refreshes under it, and a background loop writes only inside `deriving`, which first refreshes the host
parts when the save on disk is not the one they last derived from (docs/architecture.md, "Two instances on
one node").
"""

from __future__ import annotations

import contextlib
import threading
from collections.abc import Collection, Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import structlog

from cdi.writer import read_spec, remove_spec
from dra_driver.backends.base import GpuBackend
from dra_driver.core import families
from dra_driver.core.allocation import RecordsByFamily
from dra_driver.io.driver_root import DriverRoot
from dra_driver.io.safe_tree import is_plain_file
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.errors import StorageError, TesseraError
from dra_driver.vocabulary.inventory import Inventory, Placement
from dra_driver.vocabulary.names import ClaimUID, Family
from kubelet_plugin.claims.claimdir import ClaimDirs
from kubelet_plugin.host_parts import Hosts
from kubelet_plugin.host_parts.base import HostContext, Removed
from kubelet_plugin.node.file_modes import PLUGIN_DIR_MODE, make_dir
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, OfferKey
from kubelet_plugin.record.checkpoint_store import CheckpointStore, Stamp, read_boot_id
from kubelet_plugin.record.steps import NO_OBSERVER, Step, StepObserver

log = structlog.get_logger(__name__)

SHOWN_CLAIMS = 8  # claims named in one log line about another instance's changes


@dataclass(frozen=True, slots=True)
class Commits:
    """How many checkpoint writes this state made, and how many of them were durable."""

    total: int = 0
    durable: int = 0


@dataclass(frozen=True, slots=True)
class NodeInputs:
    """What a node's state is built from; `tessera plugin` and `tessera cleanup` build it in one place
    (`kubelet_plugin.serving.node_setup`)."""

    backend: GpuBackend
    paths: PluginPaths
    steps: StepObserver = NO_OBSERVER  # told as a claim passes each step (a test harness may stop it there)
    host_options: Mapping[str, str] = field(default_factory=dict)  # the host parts' own flags (`HostOption`)
    driver_root: DriverRoot | None = None
    boot_id: str | None = None  # None: the running kernel's


class NodeState:
    def __init__(self, inputs: NodeInputs) -> None:
        self.backend = backend = inputs.backend
        self.paths = paths = inputs.paths
        self.steps = steps = inputs.steps
        self.boot_id = inputs.boot_id if inputs.boot_id is not None else read_boot_id()
        self.dirs = ClaimDirs(root=paths.claims_dir)
        context = HostContext(
            backend=backend,
            paths=paths,
            steps=steps,
            options=dict(inputs.host_options),
            driver_root=inputs.driver_root,
        )
        self.hosts = Hosts(context)
        self.lock = threading.RLock()
        self.store = CheckpointStore(path=paths.checkpoint_file)
        # every instance's saves and derived writes take it, each for microseconds; always inside `lock`
        self.checkpoint_lock = PluginLock(paths.checkpoint_lock_file)
        self._cp: Checkpoint | None = None
        self._cp_stamp: Stamp | None = None  # the save `_cp` was read from or written as
        self._derived: Stamp | None = None  # the save the host parts last refreshed from (checkpoint lock)
        self._unreadable = False  # `deriving` found the save on disk unreadable (said once)
        self._known: frozenset[ClaimUID] | None = None  # the claims of the save this instance last saw
        self._known_lock = threading.Lock()
        self._dir_made = False
        self.commits = Commits()

    # ---- the checkpoint ---------------------------------------------------------------------------------

    def checkpoint(self) -> Checkpoint:
        """The current checkpoint (loaded on first use; a corrupt file raises StorageError)."""
        if self._cp is None:
            self._cp, self._cp_stamp = self.store.load_stamped(boot_id=self.boot_id)
            self._notice(self._cp)
        return self._cp

    def latest(self) -> Checkpoint:
        """The checkpoint as on disk now: the one held, unless another instance saved since (read again)."""
        with self.lock:
            if self._cp is not None and not _same(self.store.stamp(), self._cp_stamp):
                self._cp = None
            return self.checkpoint()

    def commit(self, cp: Checkpoint, *, durable: bool = False) -> Checkpoint:
        """Save (durably if asked), then adopt and let the host parts rewrite what derives from it, all under
        the checkpoint lock: no instance writes a derived file between this save and its refresh."""
        if not self._dir_made:  # the lock's, as the save's (a daemon made it before, a test may not have)
            make_dir(self.paths.plugin_dir, PLUGIN_DIR_MODE, existing="keep")
            self._dir_made = True
        with self.checkpoint_lock.held():
            elsewhere = not _same(self.store.stamp(), self._derived)
            self._cp, self._cp_stamp = cp, self.store.save(cp, durable=durable)
            with self._known_lock:
                self._known = frozenset(cp.claims)
            self.commits = Commits(self.commits.total + 1, self.commits.durable + int(durable))
            self._refresh(cp, self._cp_stamp, elsewhere=elsewhere)
        return cp

    def forget(self) -> None:
        """Read the checkpoint from disk again next time (another instance may have changed it)."""
        self._cp = None

    @contextlib.contextmanager
    def deriving(self) -> Iterator[bool]:
        """Held around every write of a node-wide file derived from the checkpoint outside a claim call (the
        vgpu loops): the checkpoint lock, with the host parts refreshed first when the save on disk is not the
        one they derived from (another instance saved it). Yields False when that save cannot be read just
        now: write nothing. An uncontended pass costs a flock and a read of the checkpoint's head."""
        with self.checkpoint_lock.held():
            yield self._catch_up()

    def _catch_up(self) -> bool:
        stamp = self.store.stamp()
        if _same(stamp, self._derived):
            return True
        try:
            cp, stamp = self.store.load_stamped(boot_id=self.boot_id)
        except TesseraError as e:
            if not self._unreadable:
                log.warning("checkpoint unreadable: node-wide files not written until it is", error=str(e))
            self._unreadable = True
            return False
        self._unreadable = False
        self._notice(cp)
        self._refresh(cp, stamp, elsewhere=True)
        return True

    def _refresh(self, cp: Checkpoint, stamp: Stamp | None, *, elsewhere: bool) -> None:
        """Let the host parts rewrite what derives from `cp` (under the checkpoint lock)."""
        for host in self.hosts:
            if elsewhere:
                host.changed_elsewhere()
            host.refresh(cp)
        self._derived = stamp

    def _notice(self, cp: Checkpoint) -> None:
        """Say which claims another instance prepared or released since this one last saw the checkpoint
        (every save in between was another's)."""
        now = frozenset(cp.claims)
        with self._known_lock:
            before, self._known = self._known, now
        if before is None or before == now:
            return
        adopted, released = sorted(now - before), sorted(before - now)
        log.info(
            "adopting the claims another instance on the node prepared or released",
            adopted=adopted[:SHOWN_CLAIMS],
            adopted_count=len(adopted),
            released=released[:SHOWN_CLAIMS],
            released_count=len(released),
        )

    def records_by_family(
        self, uid: ClaimUID, *, also: Mapping[Family, Sequence[object]] | None = None, own: bool = True
    ) -> RecordsByFamily:
        """What every family records: the claim's own (unless `own` is false), and everyone else's plus
        `also` (what this call planned for other claims already)."""
        cp = self.checkpoint()
        entry = cp.entry(uid) if own else None
        extra = also or {}
        return RecordsByFamily(
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


def _same(stamp: Stamp | None, known: Stamp | None) -> bool:
    """Whether the save on disk (`stamp`) is the one known; a stamp that cannot be told never is."""
    return stamp is not None and stamp == known


def merged(parts: Iterable[Removed]) -> Removed:
    out = Removed()
    for p in parts:
        out.cdi_files += p.cdi_files
        out.claim_dirs += p.claim_dirs
        out.host += p.host
    return out
