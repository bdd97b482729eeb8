from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.backends import open_backend
from dra_driver.backends.sim_state import read_state, write_state
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.vocabulary.errors import InventoryError, MigError, PlacementTakenError, StorageError
from dra_driver.vocabulary.inventory import Architecture

REPO = Path(__file__).resolve().parents[4]
NODES = REPO / "e2e" / "nodes"


def write_node(tmp_path: Path, body: str, name: str = "node.yaml") -> Path:
    path = tmp_path / name
    path.write_text("apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\n" + body)
    return path


def h100(tmp_path: Path, *, count: int = 2, mig: bool = True) -> Path:
    flag = "true" if mig else "false"
    return write_node(
        tmp_path, f"nodeName: n1\ngpus:\n- product: H100-80GB-SXM\n  count: {count}\n  migEnabled: {flag}\n"
    )


def test_example_node_files_load() -> None:
    counts = {"h100x8.yaml": 8, "mixed-a100-l4.yaml": 4, "a100-mig-on.yaml": 2, "h200x8.yaml": 8}
    for name, n in counts.items():
        inv = open_backend(simulate=NODES / name, state_file=None).inventory()
        assert len(inv.gpus) == n, name
    mixed = open_backend(simulate=NODES / "mixed-a100-l4.yaml", state_file=None).inventory()
    assert [g.product_name for g in mixed.gpus] == ["NVIDIA A100-SXM4-40GB"] * 2 + ["NVIDIA L4"] * 2
    assert [g.index for g in mixed.gpus] == [0, 1, 2, 3]
    assert not mixed.gpus[2].mig_capable and mixed.gpus[0].mig_capable and not mixed.gpus[0].mig_enabled


def test_inventory_fields_and_device_nodes(tmp_path: Path) -> None:
    inv = SimulatedBackend.from_file(node_file=h100(tmp_path), state_file=None).inventory()
    g = inv.gpus[1]
    assert g.uuid.startswith("GPU-") and g.architecture is Architecture.HOPPER
    assert g.memory_bytes == 81559 * 1024 * 1024 and g.memory_slice_count == 8 and len(g.mig_profiles) == 7
    assert (g.device_node.path, g.device_node.major, g.device_node.minor) == ("/dev/nvidia1", 195, 1)
    assert [n.path for n in inv.control_nodes] == [
        "/dev/nvidiactl",
        "/dev/nvidia-uvm",
        "/dev/nvidia-uvm-tools",
    ]
    assert (inv.control_nodes[0].major, inv.control_nodes[0].minor) == (195, 255)
    assert len({gpu.pci_bus_id for gpu in inv.gpus}) == 2


def test_uuids_are_deterministic_per_seed(tmp_path: Path) -> None:
    a = write_node(tmp_path, "nodeName: a\ngpus: [{product: L4, count: 2}]\n", "a.yaml")
    b = write_node(tmp_path, "nodeName: b\ngpus: [{product: L4, count: 2}]\n", "b.yaml")
    ua = [g.uuid for g in open_backend(simulate=a, state_file=None).inventory().gpus]
    ua2 = [g.uuid for g in open_backend(simulate=a, state_file=None).inventory().gpus]
    ub = [g.uuid for g in open_backend(simulate=b, state_file=None).inventory().gpus]
    assert ua == ua2 and not set(ua) & set(ub) and len(set(ua)) == 2


def test_overlap_raises_placement_taken_and_ids_are_lowest_free(tmp_path: Path) -> None:
    be = SimulatedBackend.from_file(node_file=h100(tmp_path), state_file=None)
    gpu = be.inventory().gpus[0].uuid
    first = be.create_mig_instance(gpu=gpu, profile_id=19, start=6)  # 1g.10gb at the far end
    second = be.create_mig_instance(gpu=gpu, profile_id=14, start=0)  # 2g.20gb at the start
    assert (first.gi_id, second.gi_id) == (1, 2)  # driver order, not placement order
    with pytest.raises(PlacementTakenError):
        be.create_mig_instance(gpu=gpu, profile_id=9, start=0)  # 3g.40gb over slices 0-3
    be.destroy_mig_instance(gpu=gpu, gi_id=1)
    third = be.create_mig_instance(gpu=gpu, profile_id=19, start=3)
    assert third.gi_id == 1
    assert third.uuid.startswith("MIG-") and len({first.uuid, second.uuid, third.uuid}) == 3
    minors = [n.minor for m in be.inventory().gpus[0].mig_instances for n in m.device_nodes]
    assert len(minors) == len(set(minors)) == 4
    assert all(n.path == f"/dev/nvidia-caps/nvidia-cap{n.minor}" for n in third.device_nodes)


def test_max_instances_hold(tmp_path: Path) -> None:
    be = SimulatedBackend.from_file(node_file=h100(tmp_path), state_file=None)
    gpu = be.inventory().gpus[0].uuid
    be.create_mig_instance(gpu=gpu, profile_id=20, start=0)  # 1g.10gb+me: at most one
    with pytest.raises(MigError, match="maximum"):
        be.create_mig_instance(gpu=gpu, profile_id=20, start=1)


def test_invalid_placement_and_profile(tmp_path: Path) -> None:
    be = SimulatedBackend.from_file(node_file=h100(tmp_path), state_file=None)
    gpu = be.inventory().gpus[0].uuid
    with pytest.raises(MigError, match="not a placement"):
        be.create_mig_instance(gpu=gpu, profile_id=9, start=2)
    with pytest.raises(MigError, match="no MIG profile id 42"):
        be.create_mig_instance(gpu=gpu, profile_id=42, start=0)
    with pytest.raises(InventoryError, match="no GPU"):
        be.create_mig_instance(gpu=gpu.replace("GPU-", "GPU-x"), profile_id=19, start=0)  # type: ignore[arg-type]


def test_mig_mode_rules(tmp_path: Path) -> None:
    be = SimulatedBackend.from_file(node_file=h100(tmp_path, mig=False), state_file=None)
    gpu = be.inventory().gpus[0].uuid
    with pytest.raises(MigError, match="MIG mode is off"):
        be.create_mig_instance(gpu=gpu, profile_id=19, start=0)
    be.set_mig_mode(gpu=gpu, enabled=True)
    made = be.create_mig_instance(gpu=gpu, profile_id=0, start=0)
    with pytest.raises(MigError, match="while 1 instance"):
        be.set_mig_mode(gpu=gpu, enabled=False)
    be.destroy_mig_instance(gpu=gpu, gi_id=made.gi_id)
    be.destroy_mig_instance(gpu=gpu, gi_id=made.gi_id)  # missing is not an error
    be.set_mig_mode(gpu=gpu, enabled=False)
    assert not be.inventory().gpus[0].mig_enabled


def test_ampere_and_non_mig_gpus_refuse_toggling(tmp_path: Path) -> None:
    be = open_backend(simulate=NODES / "mixed-a100-l4.yaml", state_file=None)
    inv = be.inventory()
    with pytest.raises(MigError, match="reset"):
        be.set_mig_mode(gpu=inv.gpus[0].uuid, enabled=True)
    with pytest.raises(MigError, match="not MIG-capable"):
        be.set_mig_mode(gpu=inv.gpus[2].uuid, enabled=True)
    be.set_mig_mode(gpu=inv.gpus[0].uuid, enabled=False)  # already off: nothing to do


def test_admin_instances_from_node_file(tmp_path: Path) -> None:
    inv = open_backend(simulate=NODES / "a100-mig-on.yaml", state_file=None).inventory()
    g0 = inv.gpus[0]
    assert g0.mig_enabled and [(m.profile_name, m.start, m.size) for m in g0.mig_instances] == [
        ("3g.40gb", 0, 4),
        ("1g.10gb", 4, 1),
    ]
    again = open_backend(simulate=NODES / "a100-mig-on.yaml", state_file=None).inventory()
    assert [m.uuid for m in again.gpus[0].mig_instances] == [m.uuid for m in g0.mig_instances]


def test_state_survives_restart_and_is_versioned(tmp_path: Path) -> None:
    node, state = h100(tmp_path), tmp_path / "state" / "sim.json"
    be = SimulatedBackend.from_file(node_file=node, state_file=state)
    gpu = be.inventory().gpus[1].uuid
    made = be.create_mig_instance(gpu=gpu, profile_id=15, start=2)
    be.close()
    raw = json.loads(state.read_text())
    assert (raw["apiVersion"], raw["kind"]) == ("sim.tessera.dev/v1", "SimulatedGpuState")
    restarted = SimulatedBackend.from_file(node_file=node, state_file=state)
    assert restarted.inventory().gpus[1].mig_instances == (made,)
    # Another process's change is seen by the first one, too.
    restarted.destroy_mig_instance(gpu=gpu, gi_id=made.gi_id)
    assert be.inventory().gpus[1].mig_instances == ()
    assert not list(state.parent.glob(".*.tmp"))


def test_state_round_trip(tmp_path: Path) -> None:
    node, state = h100(tmp_path), tmp_path / "sim.json"
    be = SimulatedBackend.from_file(node_file=node, state_file=state)
    gpu = be.inventory().gpus[0].uuid
    be.create_mig_instance(gpu=gpu, profile_id=19, start=0)
    loaded = read_state(state)
    assert loaded is not None
    write_state(tmp_path / "copy.json", loaded)
    assert read_state(tmp_path / "copy.json") == loaded


def test_corrupt_or_foreign_state_is_a_clear_error(tmp_path: Path) -> None:
    node, state = h100(tmp_path), tmp_path / "sim.json"
    state.write_text("{not json")
    with pytest.raises(StorageError, match="corrupt"):
        SimulatedBackend.from_file(node_file=node, state_file=state)
    state.write_text(
        json.dumps(
            {
                "apiVersion": "sim.tessera.dev/v1",
                "kind": "SimulatedGpuState",
                "gpus": {"GPU-other": {"migEnabled": True, "instances": []}},
            }
        )
    )
    with pytest.raises(InventoryError, match="GPU-other"):
        SimulatedBackend.from_file(node_file=node, state_file=state)
