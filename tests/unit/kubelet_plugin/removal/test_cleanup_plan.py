"""What `tessera cleanup` removes, decided from a checkpoint and what was found on the node (pure)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from dra_driver.core.families import mig
from dra_driver.core.families.mig import MigRecord
from dra_driver.core.mig_mode import mig_mode_restore
from dra_driver.vocabulary.container import DeviceNode
from dra_driver.vocabulary.inventory import Architecture, Gpu, Inventory, MigInstance, Placement
from dra_driver.vocabulary.names import ClaimUID, GpuUUID, is_dra_socket_name, is_registration_socket_name
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState, records_of
from kubelet_plugin.record.leftovers import Leftover, LeftoverKind
from kubelet_plugin.removal.cleanup_plan import NodeSurvey, PendingClaim, plan_cleanup

H100 = GpuUUID("GPU-h100")
A100 = GpuUUID("GPU-a100")


def gpu(uuid: GpuUUID, index: int, *instances: MigInstance, mig_enabled: bool = True) -> Gpu:
    return Gpu(
        index=index,
        uuid=uuid,
        product_name="NVIDIA H100 80GB HBM3",
        brand="Nvidia",
        architecture=Architecture.HOPPER,
        cuda_compute_capability="9.0",
        memory_bytes=80 << 30,
        multiprocessors=132,
        pci_bus_id=f"00000000:{index + 16:02X}:00.0",
        device_node=DeviceNode(f"/dev/nvidia{index}", 195, index),
        mig_capable=True,
        mig_enabled=mig_enabled,
        mig_instances=instances,
    )


def instance(parent: GpuUUID, start: int, uuid: str) -> MigInstance:
    return MigInstance(
        parent_uuid=parent,
        profile_id=19,
        profile_name="1g.10gb",
        start=start,
        size=1,
        gi_id=start + 1,
        ci_id=0,
        uuid=uuid,
    )


def inventory(*gpus: Gpu) -> Inventory:
    return Inventory(driver_version="550.54.15", cuda_driver_version="12.4", gpus=gpus)


def entry(uid: str, state: ClaimState, *records: MigRecord) -> ClaimEntry:
    return ClaimEntry(
        uid=ClaimUID(uid),
        namespace="ns",
        name=f"claim-{uid}",
        state=state,
        records=records_of({mig.NAME: records}) if records else (),
    )


def record(start: int, *, ours: bool = True) -> MigRecord:
    return MigRecord(
        device=f"gpu-0-mig-1g10gb-{start}",
        placement=Placement(H100, 19, start),
        profile_name="1g.10gb",
        created_by_tessera=ours,
    )


FILES = (
    Leftover(LeftoverKind.CDI_SPEC, "/var/run/cdi/k8s.gpu.tessera.dev-claim_u.json"),
    Leftover(LeftoverKind.DIRECTORY, "/var/lib/tessera/claims"),
)


@pytest.mark.parametrize("state", [ClaimState.PREPARE_COMPLETED, ClaimState.PREPARE_STARTED])
def test_a_prepared_claim_blocks_everything_and_is_named(state: ClaimState) -> None:
    cp = Checkpoint(boot_id="b", claims={ClaimUID("u"): entry("u", state)})
    plan = plan_cleanup(
        cp, NodeSurvey(inventory=inventory(), on_host=(Leftover(LeftoverKind.MPS_DAEMON, H100),), files=FILES)
    )
    assert plan.blocked and plan.pending == (PendingClaim("ns", "claim-u", ClaimUID("u")),)
    assert (plan.leftovers, plan.unfinished) == ((), ())
    assert str(plan.pending[0]) == "ns/claim-u (UID u)"


def test_a_node_plugin_still_serving_blocks_everything() -> None:
    survey = NodeSurvey(inventory=inventory(), files=FILES, serving=("/var/lib/kubelet/plugins/x/dra.sock",))
    plan = plan_cleanup(Checkpoint(boot_id="b"), survey)
    assert plan.blocked and plan.serving == survey.serving and plan.leftovers == ()


def test_a_claim_only_its_cdi_spec_knows_blocks_too() -> None:
    lost = PendingClaim("ns", "lost", ClaimUID("l"))
    plan = plan_cleanup(Checkpoint(boot_id="b"), NodeSurvey(inventory=inventory(), unrecorded=(lost,)))
    assert plan.pending == (lost,)


def test_an_empty_node_plans_nothing() -> None:
    plan = plan_cleanup(Checkpoint(boot_id="b"), NodeSurvey(inventory=inventory(gpu(H100, 0))))
    assert plan.empty and not plan.blocked and plan.kept == ()


def test_daemons_then_instances_and_mode_then_files_in_the_order_found() -> None:
    ours = instance(H100, 0, "MIG-ours")
    cp = Checkpoint(
        boot_id="b",
        claims={ClaimUID("u"): entry("u", ClaimState.UNPREPARE_STARTED, record(0))},
        owned={mig.NAME: frozenset({H100})},
    )
    on_host = (Leftover(LeftoverKind.MPS_DAEMON, A100),)
    survey = NodeSurvey(inventory=inventory(gpu(H100, 0, ours)), on_host=on_host, files=FILES)
    plan = plan_cleanup(cp, survey)
    assert plan.unfinished == (PendingClaim("ns", "claim-u", ClaimUID("u")),)
    assert plan.leftovers == (
        Leftover(LeftoverKind.MPS_DAEMON, A100),
        Leftover(LeftoverKind.MIG_INSTANCE, "MIG-ours"),
        Leftover(LeftoverKind.MIG_MODE, H100),
        *FILES,
    )
    assert [str(x) for x in plan.leftovers[:3]] == [
        "mps-daemon GPU-a100",
        "mig-instance MIG-ours",
        "mig-mode GPU-h100",
    ]


def test_an_administrators_instances_and_mode_are_never_in_the_plan() -> None:
    admin_on_h100 = instance(H100, 4, "MIG-admin")  # on a GPU whose MIG mode Tessera switched on
    admin_static = instance(A100, 0, "MIG-static")  # used by a claim, but not created by Tessera
    used = MigRecord(
        device="gpu-1-mig-1g10gb-0",
        placement=admin_static.placement,
        profile_name="1g.10gb",
        created_by_tessera=False,
    )
    cp = Checkpoint(
        boot_id="b",
        claims={ClaimUID("u"): entry("u", ClaimState.UNPREPARE_STARTED, record(0), used)},
        owned={mig.NAME: frozenset({H100})},
    )
    node = inventory(gpu(H100, 0, instance(H100, 0, "MIG-ours"), admin_on_h100), gpu(A100, 1, admin_static))
    plan = plan_cleanup(cp, NodeSurvey(inventory=node))
    assert plan.leftovers == (Leftover(LeftoverKind.MIG_INSTANCE, "MIG-ours"),)
    (kept,) = plan.kept
    assert H100 in kept and "stays on" in kept


def test_mig_mode_nobody_switched_is_left_alone_and_gone_gpus_are_forgotten() -> None:
    cp = Checkpoint(boot_id="b", owned={mig.NAME: frozenset({GpuUUID("GPU-gone")})})
    plan = plan_cleanup(cp, NodeSurvey(inventory=inventory(gpu(H100, 0), gpu(A100, 1))))
    assert plan.empty and plan.kept == ()


def test_unreadable_gpus_are_said_not_guessed() -> None:
    cp = Checkpoint(boot_id="b", owned={mig.NAME: frozenset({H100})})
    plan = plan_cleanup(cp, NodeSurvey(inventory=None, inventory_problem="NVML: driver not loaded"))
    assert plan.leftovers == () and plan.kept == (
        "MIG instances and MIG mode cannot be told: NVML: driver not loaded",
    )


def test_the_mig_mode_rule_is_the_mig_host_parts() -> None:
    node = inventory(
        gpu(H100, 0, instance(H100, 0, "MIG-x")),
        gpu(A100, 1),
        replace(gpu(GpuUUID("GPU-off"), 2), mig_enabled=False),
    )
    owned = {H100, A100, GpuUUID("GPU-off")}
    assert mig_mode_restore(owned, in_use=(), inventory=node).switch_off == (A100,)
    assert mig_mode_restore(owned, in_use=(), inventory=node).keep == {H100}
    assert mig_mode_restore(owned, in_use=(), inventory=node, going={"MIG-x"}).switch_off == (A100, H100)
    assert mig_mode_restore(owned, in_use={A100}, inventory=node).keep == {H100, A100}


def test_our_socket_names_with_and_without_a_pod_uid() -> None:
    assert is_registration_socket_name("gpu.tessera.dev-reg.sock")
    assert is_registration_socket_name("gpu.tessera.dev-0f1e-reg.sock")
    assert not is_registration_socket_name("other.vendor.com-reg.sock")
    assert is_dra_socket_name("dra.sock") and is_dra_socket_name("dra-0f1e.sock")
    assert not is_dra_socket_name("checkpoint.json") and not is_dra_socket_name("plugin.lock")
