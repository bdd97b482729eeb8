"""What host parts take down is reported in their own words: the generic parts (teardown, settling, the
reconcile report, cleanup's lines) carry it without knowing any family."""

from __future__ import annotations

import pytest

from dra_driver.core.families import mig
from dra_driver.vocabulary.errors import InventoryError, MigError
from dra_driver.vocabulary.inventory import Inventory, MigInstance
from dra_driver.vocabulary.names import GpuUUID
from kubelet_plugin.claims.node_state import merged
from kubelet_plugin.claims.reconcile import ReconcileReport
from kubelet_plugin.host_parts.base import HostContext, Removed
from kubelet_plugin.host_parts.mig import MigHost
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint import Checkpoint
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind
from kubelet_plugin.record.steps import NO_OBSERVER
from kubelet_plugin.removal.removal_record import removal_lines, report_lines
from tests.support.inventories import make_gpu, make_inventory

GPU = make_gpu(0, "H100-80GB-SXM", mig_enabled=True)


class Backend:
    """A GPU backend whose inventory is `GPU`, or fails; it remembers the MIG mode switches."""

    def __init__(self, *, fails: bool = False) -> None:
        self.fails = fails
        self.switched: list[tuple[GpuUUID, bool]] = []

    def inventory(self) -> Inventory:
        if self.fails:
            raise InventoryError("NVML: GPU is lost")
        return make_inventory(GPU)

    def set_mig_mode(self, *, gpu: GpuUUID, enabled: bool) -> None:
        self.switched.append((gpu, enabled))

    def create_mig_instance(self, *, gpu: GpuUUID, profile_id: int, start: int) -> MigInstance:
        raise AssertionError("not used")

    def destroy_mig_instance(self, *, gpu: GpuUUID, gi_id: int) -> None:
        raise AssertionError("not used")

    def close(self) -> None:
        pass


def host(backend: Backend) -> MigHost:
    return MigHost(HostContext(backend=backend, paths=PluginPaths.defaults(), steps=NO_OBSERVER))


OWNED = Checkpoint(boot_id="b").with_owned(mig.NAME, [GPU.uuid])


def test_a_family_nobody_listed_reads_like_the_rest() -> None:
    removed = merged(
        [
            Removed(cdi_files=["/var/run/cdi/x.json"]),
            Removed(host=[Leftover(LeftoverKind.MIG_INSTANCE, "MIG-1"), Leftover("widget-lease", "GPU-0")]),
            Removed(claim_dirs=["/var/lib/tessera/claims/x"]),
        ]
    )
    assert removal_lines(removed) == [
        "cdi-spec /var/run/cdi/x.json",
        "claim-dir /var/lib/tessera/claims/x",
        "mig-instance MIG-1",
        "widget-lease GPU-0",
    ]


def test_the_reconcile_report_keeps_what_host_parts_said() -> None:
    went = (
        Leftover(LeftoverKind.MIG_INSTANCE, "MIG-1"),
        Leftover(LeftoverKind.MIG_MODE, "GPU-0"),
        Leftover("w", "x"),
    )
    report = ReconcileReport(
        boot_changed=False,
        recovery=None,
        adopted_claims=(),
        released_claims=(),
        rolled_forward=(),
        kept_claims=(),
        removed_cdi_files=(),
        removed_claim_dirs=(),
        removed_on_host=went,
        problems=(),
    )
    assert report.removed_anything
    assert report.removed_on_host_of("mig-instance") == ("MIG-1",)
    assert report.removed_on_host_of(LeftoverKind.MIG_MODE) == ("GPU-0",)
    assert report_lines(report) == ["mig-instance MIG-1", "mig-mode GPU-0", "w x"]


def test_mig_mode_switched_off_is_reported_by_the_mig_host_part() -> None:
    backend = Backend()
    cp, removed = host(backend).settle(OWNED, leaving=())
    assert backend.switched == [(GPU.uuid, False)] and cp.owned_by(mig.NAME) == frozenset()
    assert removed.host == [Leftover(LeftoverKind.MIG_MODE, GPU.uuid)]


def test_a_settle_failure_says_what_the_host_part_was_undoing() -> None:
    with pytest.raises(MigError, match=r"^switching MIG mode off: NVML: GPU is lost$"):
        host(Backend(fails=True)).settle(OWNED, leaving=())
