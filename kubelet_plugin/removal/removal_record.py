"""What a `tessera cleanup` instance removed from the node through the node daemon's own code.

The unprepares it serves, and start-up reconciliation, remove claims' files, MIG instances, MIG mode and MPS
control daemons through `NodeState.teardown` and `NodeState.settle`; `RecordedState` is the same state
keeping a line for each thing they removed, so that the `node clean` event lists everything that went, not
only what the final sweep removed. Lines read like the sweep's (`<kind> <target>`, `cleanup_plan`).
"""

from __future__ import annotations

import threading
from collections.abc import Collection, Iterable

from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.node_state import NodeInputs, NodeState
from kubelet_plugin.claims.reconcile import ReconcileReport
from kubelet_plugin.host_parts.base import Removed
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind


def removal_lines(removed: Removed) -> list[str]:
    kinds = ((LeftoverKind.CDI_SPEC, removed.cdi_files), (LeftoverKind.CLAIM_DIR, removed.claim_dirs))
    lines = [str(Leftover(kind, target)) for kind, targets in kinds for target in targets]
    return lines + [str(w) for w in removed.host]  # the host parts' own words, `<kind> <target>` too


def report_lines(report: ReconcileReport) -> list[str]:
    """What start-up reconciliation removed (orphans included, which no teardown saw)."""
    return removal_lines(
        Removed(
            cdi_files=list(report.removed_cdi_files),
            claim_dirs=list(report.removed_claim_dirs),
            host=list(report.removed_on_host),
        )
    )


def distinct(lines: Iterable[str]) -> list[str]:
    return list(dict.fromkeys(lines))


class RecordedState(NodeState):
    """A `NodeState` that remembers what its teardowns and settling removed."""

    def __init__(self, inputs: NodeInputs) -> None:
        super().__init__(inputs)
        self._went: list[str] = []
        self._went_lock = threading.Lock()

    @property
    def went(self) -> list[str]:
        with self._went_lock:
            return distinct(self._went)

    def note(self, lines: Iterable[str]) -> None:
        with self._went_lock:
            self._went.extend(lines)

    def teardown(self, entry: ClaimEntry) -> Removed:
        removed = super().teardown(entry)
        self.note(removal_lines(removed))
        return removed

    def settle(self, cp: Checkpoint, *, leaving: Collection[ClaimUID]) -> tuple[Checkpoint, Removed]:
        cp, removed = super().settle(cp, leaving=leaving)
        self.note(removal_lines(removed))
        return cp, removed
