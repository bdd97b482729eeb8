"""Tessera's NVML backend (dra_driver/backends/nvml.py) through pynvml against the fake libnvidia-ml: the same
inventory as the simulated backend for every node file, MIG mode on and off, every placement of an H100 and
an A100 created and destroyed, and `tessera inventory` on the NVML path."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

import pynvml
import pytest
import yaml

from dra_driver.backends import open_backend
from dra_driver.backends.base import GpuBackend
from dra_driver.backends.nvml import NvmlBackend
from dra_driver.backends.sim_node import (
    FABRIC_REQUIRED,
    GPU_OPTIONAL,
    GPU_REQUIRED,
    INSTANCE_REQUIRED,
    NODE_OPTIONAL,
    NODE_REQUIRED,
)
from dra_driver.core.families.base import Json
from dra_driver.core.profiles import PRODUCTS, product
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.errors import MigError, PlacementTakenError
from dra_driver.vocabulary.inventory import Fabric, Gpu, Inventory, MigInstance
from dra_driver.vocabulary.names import PCI_BUS_ID_ATTRIBUTE, SYSFS_ROOT_ENV, GpuUUID, qualified
from tests.support.doubles.fake_nvml import (
    SIMULATED_ONLY_FIELDS,
    SYS_ENV,
    FakeNvmlNode,
    pynvml_on_fake,
    reset_gpu,
)

REPO = Path(__file__).resolve().parents[2]
NODE_FILES = sorted((REPO / "e2e" / "nodes").glob("*.yaml"))
HEADER = "apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\n"
CAPS_MAJOR = 237  # the nvidia-caps line the fake writes into its /proc/devices


def fake_node(tmp_path: Path, text: str | None = None, node_file: Path | None = None) -> FakeNvmlNode:
    if node_file is None:
        node_file = tmp_path / "node.yaml"
        node_file.write_text(text or "")
    return FakeNvmlNode(node_file=node_file, state_dir=tmp_path / "fake-nvml")


@pytest.fixture
def nvml_on(tmp_path: Path) -> Iterator[Any]:
    """Opens an NVML backend on a node file (text) inside this test; everything is shut down after it."""
    with pynvml_on_fake(fake_node(tmp_path)) as lib:

        def open_on(text: str) -> NvmlBackend:
            (tmp_path / "node.yaml").write_text(HEADER + text)
            backend = NvmlBackend.open()
            backend.lib = lib  # type: ignore[attr-defined]
            return backend

        yield open_on


def without_driver_ids(inv: Inventory) -> Inventory:
    """What both backends must agree on: all but UUIDs, PCI bus ids and what the driver numbers itself
    (GPU/compute instance ids, MIG UUIDs, capability minors)."""

    def mig(m: MigInstance) -> MigInstance:
        return replace(m, parent_uuid=GpuUUID(""), gi_id=0, ci_id=0, uuid="", device_nodes=())

    def gpu(g: Gpu) -> Gpu:
        return replace(
            g, uuid=GpuUUID(""), pci_bus_id="", mig_instances=tuple(mig(m) for m in g.mig_instances)
        )

    return replace(inv, gpus=tuple(gpu(g) for g in inv.gpus))


def without_ids(slices: list[Json]) -> str:
    """The slices as JSON without UUIDs and PCI bus ids."""
    text = json.dumps(slices, sort_keys=True)
    for s in slices:
        for d in s["spec"].get("devices", []):
            for key in (qualified("uuid"), qualified("parentUUID"), PCI_BUS_ID_ATTRIBUTE):
                if key in d["attributes"]:
                    text = text.replace(json.dumps(d["attributes"][key]["string"]), '"-"')
    return text


@pytest.mark.parametrize("node_file", NODE_FILES, ids=lambda p: p.stem)
def test_inventory_and_slices_equal_the_simulated_ones(tmp_path: Path, node_file: Path) -> None:
    simulated = open_backend(simulate=node_file, state_file=None).inventory()
    with pynvml_on_fake(fake_node(tmp_path, node_file=node_file)):
        backend = NvmlBackend.open()
        nvml = backend.inventory()
        backend.close()
    assert without_driver_ids(nvml) == without_driver_ids(simulated)
    # two independent answers: where the node file names no UUID, each side makes up its own
    pinned = {str(g.get("uuid")) for g in yaml.safe_load(node_file.read_text())["gpus"] if "uuid" in g}
    made_up = [
        (a.uuid, b.uuid) for a, b in zip(nvml.gpus, simulated.gpus, strict=True) if a.uuid not in pinned
    ]
    assert all(a != b for a, b in made_up)
    assert {g.uuid for g in nvml.gpus} >= pinned
    settings = NodeSettings(node_name="n")
    assert without_ids(build_slices(nvml, settings)) == without_ids(build_slices(simulated, settings))
    for gpu in nvml.gpus:  # administrator's instances: /dev/nvidia-caps nodes from the driver's /proc
        for m in gpu.mig_instances:
            assert m.uuid.startswith("MIG-") and [n.major for n in m.device_nodes] == [CAPS_MAJOR] * 2


def test_every_products_profile_table_is_the_simulated_one(tmp_path: Path) -> None:
    """Products no node file lists too (A30, H100 PCIe): one description, dra_driver/core/profiles.py."""
    gpus = "".join(f"- product: {p.key}\n" for p in PRODUCTS)
    with pynvml_on_fake(fake_node(tmp_path, HEADER + "gpus:\n" + gpus)):
        backend = NvmlBackend.open()
        inventory = backend.inventory()
        backend.close()
    assert [g.product_name for g in inventory.gpus] == [p.product_name for p in PRODUCTS]
    for gpu, prod in zip(inventory.gpus, PRODUCTS, strict=True):
        assert gpu.mig_profiles == prod.mig_profiles, prod.key
        assert (gpu.mig_capable, gpu.memory_slice_count) == (prod.mig_capable, prod.memory_slice_count)
        assert (gpu.multiprocessors, gpu.memory_bytes) == (prod.multiprocessors, prod.memory_bytes)
        assert (gpu.architecture, gpu.cuda_compute_capability) == (
            prod.architecture,
            prod.cuda_compute_capability,
        )


def test_mig_mode_on_and_off(nvml_on: Any) -> None:
    backend = nvml_on("gpus:\n- product: H100-80GB-SXM\n- product: A100-SXM4-80GB\n- product: L4\n")
    h100, a100, l4 = (g.uuid for g in backend.inventory().gpus)
    backend.set_mig_mode(gpu=h100, enabled=True)
    assert [g.mig_enabled for g in backend.inventory().gpus] == [True, False, False]
    made = backend.create_mig_instance(gpu=h100, profile_id=9, start=4)
    with pytest.raises(MigError, match="still use it"):
        backend.set_mig_mode(gpu=h100, enabled=False)
    backend.destroy_mig_instance(gpu=h100, gi_id=made.gi_id)
    backend.set_mig_mode(gpu=h100, enabled=False)
    assert [g.mig_enabled for g in backend.inventory().gpus] == [False, False, False]
    with pytest.raises(MigError, match="pending"):  # Ampere: only after a reset
        backend.set_mig_mode(gpu=a100, enabled=True)
    assert backend.inventory().gpus[1].mig_enabled is False
    assert reset_gpu(backend.lib, 1) == pynvml.NVML_SUCCESS
    assert backend.inventory().gpus[1].mig_enabled is True
    with pytest.raises(MigError):
        backend.set_mig_mode(gpu=l4, enabled=True)


def test_a_gpu_that_falls_off_the_bus_is_read_as_lost_until_it_is_back(tmp_path: Path, nvml_on: Any) -> None:
    backend = nvml_on("gpus:\n- product: H100-80GB-SXM\n  count: 2\n")
    first, second = backend.inventory().gpus
    marker = fake_node(tmp_path).lost_marker(second.uuid)
    marker.touch()
    gone = backend.inventory().gpus
    assert gone[0].faults == ()
    assert [f.kind.value for f in gone[1].faults] == ["lost"] and gone[1].uuid == second.uuid
    with pytest.raises(pynvml.NVMLError_GpuIsLost):
        pynvml.nvmlDeviceGetHandleByUUID(second.uuid.encode())
    marker.unlink()
    assert [g.faults for g in backend.inventory().gpus] == [(), ()]
    assert first.faults == ()


def overlaps(a: tuple[int, int], b: tuple[int, int]) -> bool:
    return a[0] < b[0] + b[1] and b[0] < a[0] + a[1]


@pytest.mark.parametrize("key", ["H100-80GB-SXM", "A100-SXM4-80GB"])
def test_create_and_destroy_at_every_placement(nvml_on: Any, key: str) -> None:
    backend: GpuBackend = nvml_on(f"gpus:\n- product: {key}\n  migEnabled: true\n")
    gpu = backend.inventory().gpus[0]
    prod = product(key)
    every = [(p, s) for p in prod.mig_profiles for s in p.placement_starts]
    assert len(every) == 25
    for prof, start in every:
        made = backend.create_mig_instance(gpu=gpu.uuid, profile_id=prof.profile_id, start=start)
        assert (made.profile_name, made.start, made.size, made.ci_id) == (
            prof.name,
            start,
            prof.memory_slices,
            0,
        )
        assert made.parent_uuid == gpu.uuid and made.uuid.startswith("MIG-")
        # the driver's partition id range of that memory size (8 slices: 0, 4: 1-2, 2: 3-6, 1: 7-14)
        assert made.gi_id == 8 // prof.memory_slices - 1
        gi_minor = 3 + made.gi_id * 9  # GPU 0 of /proc/driver/nvidia-caps/mig-minors
        assert [(n.major, n.minor) for n in made.device_nodes] == [
            (CAPS_MAJOR, gi_minor),
            (CAPS_MAJOR, gi_minor + 1),
        ]
        assert backend.inventory().gpus[0].mig_instances == (made,)
        for other, other_start in every:
            if overlaps((start, prof.memory_slices), (other_start, other.memory_slices)):
                with pytest.raises(PlacementTakenError):
                    backend.create_mig_instance(gpu=gpu.uuid, profile_id=other.profile_id, start=other_start)
        backend.destroy_mig_instance(gpu=gpu.uuid, gi_id=made.gi_id)
        assert backend.inventory().gpus[0].mig_instances == ()
        backend.destroy_mig_instance(gpu=gpu.uuid, gi_id=made.gi_id)  # already gone: no error
    with pytest.raises(MigError, match="no such profile or placement"):
        backend.create_mig_instance(gpu=gpu.uuid, profile_id=9, start=2)


def test_a_full_gpu_and_ids_that_follow_creation_not_placement(nvml_on: Any) -> None:
    backend = nvml_on("gpus:\n- product: H100-80GB-SXM\n  migEnabled: true\n")
    uuid = backend.inventory().gpus[0].uuid
    made = [backend.create_mig_instance(gpu=uuid, profile_id=19, start=s) for s in (6, 5, 4, 3, 2, 1, 0)]
    assert [m.gi_id for m in made] == [7, 8, 9, 10, 11, 12, 13]
    assert len({m.uuid for m in made}) == 7
    listed = backend.inventory().gpus[0].mig_instances
    assert [(m.start, m.gi_id, m.uuid) for m in listed] == sorted((m.start, m.gi_id, m.uuid) for m in made)
    with pytest.raises(PlacementTakenError):  # 1g.10gb at its maximum of 7
        backend.create_mig_instance(gpu=uuid, profile_id=20, start=0)


def test_instances_survive_a_restart_of_the_backend(nvml_on: Any) -> None:
    backend = nvml_on("gpus:\n- product: H100-80GB-SXM\n  migEnabled: true\n")
    uuid = backend.inventory().gpus[0].uuid
    made = backend.create_mig_instance(gpu=uuid, profile_id=14, start=2)
    backend.close()
    again = NvmlBackend.open()
    assert again.inventory().gpus[0].mig_instances == (made,)
    again.close()


EVERY_FIELD = HEADER + textwrap.dedent(
    """\
    nodeName: every-field
    seed: some-seed
    driverVersion: "535.104.05"
    cudaDriverVersion: "12.2"
    hostMemoryGiB: 640
    gpus:
    - product: NVIDIA H100 PCIe
      count: 2
      healthy: true
      numaNode: 1
      pcieRoot: pci0000:c1
      nvlink: bridge
    - product: A100-SXM4-80GB
      uuid: GPU-00000000-1111-2222-3333-444444444444
      migEnabled: true
      instances:
      - {profile: 4g.40gb, start: 0}
      - {profile: 15, start: 4}
      nvlink: switch
      fabric: {clusterUuid: 2b6d5c3a-0f1e-4d2c-9b8a-7766554433aa, cliqueId: 32767}
    - product: L4
      healthy: false
    """
)


def fields_of(text: str) -> set[str]:
    node = yaml.safe_load(text)
    gpus = node["gpus"]
    instances = [i for g in gpus for i in g.get("instances", [])]
    fabrics = {k for g in gpus for k in g.get("fabric", {})}
    return set(node) | {k for g in gpus for k in g} | {k for i in instances for k in i} | fabrics


def test_a_node_file_means_the_same_to_both_backends(tmp_path: Path) -> None:
    """One description of a node: every SimulatedNode field is read by the fake too, and all but the
    documented simulated-only ones (SIMULATED_ONLY_FIELDS) give the same inventory."""
    known = NODE_REQUIRED | NODE_OPTIONAL | GPU_REQUIRED | GPU_OPTIONAL | INSTANCE_REQUIRED | FABRIC_REQUIRED
    assert fields_of(EVERY_FIELD) == known  # the file below uses every field the simulated backend knows
    assert set(SIMULATED_ONLY_FIELDS) <= GPU_OPTIONAL
    node_file = tmp_path / "node.yaml"
    node_file.write_text(EVERY_FIELD)
    simulated = open_backend(simulate=node_file, state_file=None).inventory()
    with pynvml_on_fake(fake_node(tmp_path, node_file=node_file)):
        backend = NvmlBackend.open()
        nvml = backend.inventory()
        backend.close()
    assert nvml.gpus[2].uuid == simulated.gpus[2].uuid == "GPU-00000000-1111-2222-3333-444444444444"
    assert [len(g.mig_instances) for g in nvml.gpus] == [0, 0, 2, 0]
    # the host's memory: the node file's, and the fake's /proc/meminfo that the NVML path reads
    assert nvml.host_memory_bytes == simulated.host_memory_bytes == 640 << 30
    # topology: the fake's sysfs tree and NVLink/fabric answers say what the node file says
    assert [(g.pcie_root, g.numa_node) for g in nvml.gpus] == [("pci0000:c1", 1)] * 2 + [(None, None)] * 2
    assert [g.nvlinks.peers for g in nvml.gpus] == [(1,), (0,), (), ()]
    assert [g.nvlinks.switch for g in nvml.gpus] == [False, False, True, False]
    assert nvml.gpus[2].fabric == Fabric("2b6d5c3a-0f1e-4d2c-9b8a-7766554433aa", 32767)
    # healthy: false is the simulated backend's fault injection; the NVML path has no health to read
    assert [g.healthy for g in simulated.gpus] == [True, True, True, False]
    assert all(g.healthy for g in nvml.gpus)
    healthy_again = replace(simulated, gpus=tuple(replace(g, healthy=True) for g in simulated.gpus))
    assert without_driver_ids(nvml) == without_driver_ids(healthy_again)


def run_tessera(args: list[str], env: dict[str, str]) -> str:
    done = subprocess.run(
        [sys.executable, "-m", "dra_driver.cli", "inventory", *args],
        env=env,
        cwd=REPO,
        capture_output=True,
        text=True,
        check=True,
    )
    return done.stdout


def test_tessera_inventory_on_the_nvml_path_prints_the_simulated_slices(tmp_path: Path) -> None:
    """LD_LIBRARY_PATH=interceptor/build/fake FAKE_NVML_NODE=e2e/nodes/h100x8.yaml tessera inventory"""
    node_file = REPO / "e2e" / "nodes" / "h100x8.yaml"
    base = {k: v for k, v in os.environ.items() if not k.startswith(("FAKE_", "TESSERA_"))}
    base["NODE_NAME"] = "sim-h100x8"  # the pool name; the simulated run takes it from the node file
    nvml_env = {**base, "LD_LIBRARY_PATH": str(REPO / "interceptor" / "build" / "fake")}
    nvml_env["FAKE_NVML_NODE"] = str(node_file)
    nvml_env[SYS_ENV] = nvml_env[SYSFS_ROOT_ENV] = str(tmp_path / "sys")  # the PCI topology's sysfs tree
    for output in ("summary", "json"):
        nvml = run_tessera(["-o", output], nvml_env)
        simulated = run_tessera(["--simulate", str(node_file), "-o", output], base)
        if output == "summary":
            assert nvml == simulated
            assert "5 slices, 224 devices" in nvml
        else:
            nvml_slices, sim_slices = json.loads(nvml)["items"], json.loads(simulated)["items"]
            assert without_ids(nvml_slices) == without_ids(sim_slices)
            assert nvml != simulated
