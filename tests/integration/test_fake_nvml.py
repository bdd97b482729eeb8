"""The fake libnvidia-ml (interceptor/build/fake) driven by pynvml: the answers the real H100 gave
(shared/facts: `nvidia-smi mig -lgip/-lgipp`, the published inventory), the struct versions pynvml passes,
the driver's MIG rules and error codes, and its state shared across processes and restarts."""

from __future__ import annotations

import ctypes
import subprocess
import sys
import textwrap
from collections.abc import Iterator
from pathlib import Path

import pynvml
import pytest
import yaml

from dra_driver.backends.sim_node import decode_node
from dra_driver.vocabulary.errors import ConfigError
from tests.support.doubles.fake_nvml import FakeNvmlNode, pynvml_on_fake, read_state, reset_gpu

REPO = Path(__file__).resolve().parents[2]
HEADER = "apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\n"
H100_A100_L4 = HEADER + textwrap.dedent(
    """\
    driverVersion: "580.159.04"
    cudaDriverVersion: "13.0"
    gpus:
    - product: H100-80GB-SXM
    - product: A100-SXM4-80GB
    - product: L4
    """
)
# `nvidia-smi mig -lgip` on the real H100 80GB HBM3 (shared/facts/mig-and-nvml.md), by profile index:
# id, name, MiB, SMs, max instances, CE/DEC/ENC/JPEG/OFA, compute slices
H100_LGIP = {
    0: (19, "MIG 1g.10gb", 9984, 16, 7, (1, 1, 0, 1, 0), 1),
    7: (20, "MIG 1g.10gb+me", 9984, 16, 1, (1, 1, 0, 1, 1), 1),
    9: (15, "MIG 1g.20gb", 20096, 26, 4, (1, 1, 0, 1, 0), 1),
    1: (14, "MIG 2g.20gb", 20096, 32, 3, (2, 2, 0, 2, 0), 2),
    2: (9, "MIG 3g.40gb", 40448, 60, 2, (3, 3, 0, 3, 0), 3),
    3: (5, "MIG 4g.40gb", 40448, 64, 1, (4, 4, 0, 4, 0), 4),
    4: (0, "MIG 7g.80gb", 81152, 132, 1, (8, 7, 0, 7, 1), 7),
}
# `nvidia-smi mig -lgipp`: profile id -> (starts, size); 25 placements
H100_LGIPP = {
    19: ([0, 1, 2, 3, 4, 5, 6], 1),
    20: ([0, 1, 2, 3, 4, 5, 6], 1),
    15: ([0, 2, 4, 6], 2),
    14: ([0, 2, 4], 2),
    9: ([0, 4], 4),
    5: ([0], 4),
    0: ([0], 8),
}


def fake_node(tmp_path: Path, text: str) -> FakeNvmlNode:
    node_file = tmp_path / "node.yaml"
    node_file.write_text(text)
    return FakeNvmlNode(node_file=node_file, state_dir=tmp_path / "state")


@pytest.fixture
def node(tmp_path: Path) -> Iterator[FakeNvmlNode]:
    fake = fake_node(tmp_path, H100_A100_L4)
    with pynvml_on_fake(fake):
        pynvml.nvmlInit()
        yield fake


def nvml_code(call: object, *args: object) -> int:
    """The NVML return code of a pynvml call (0 when it succeeds)."""
    assert callable(call)
    try:
        call(*args)
    except pynvml.NVMLError as e:
        return int(e.value)
    return int(pynvml.NVML_SUCCESS)


def placements(h: object, profile_id: int) -> list[tuple[int, int]]:
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, None, ctypes.byref(count))
    array = (pynvml.c_nvmlGpuInstancePlacement_t * count.value)()
    pynvml.nvmlDeviceGetGpuInstancePossiblePlacements(h, profile_id, array, ctypes.byref(count))
    return [(p.start, p.size) for p in array]


def create(h: object, profile_id: int, start: int, size: int) -> object:
    placement = pynvml.c_nvmlGpuInstancePlacement_t(start, size)
    return pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(h, profile_id, ctypes.byref(placement))


def create_with_ci(h: object, profile_id: int, start: int, size: int, ci_index: int) -> tuple[object, object]:
    gi = create(h, profile_id, start, size)
    info = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, ci_index, 0)
    return gi, pynvml.nvmlGpuInstanceCreateComputeInstance(gi, info.id)


def test_struct_layouts_are_the_versions_pynvml_passes() -> None:
    """The fake checks `version` against these (static-asserted in interceptor/fake/nvml/defs.h)."""
    assert ctypes.sizeof(pynvml.c_nvmlGpuInstanceProfileInfo_v2_t) | 2 << 24 == 0x02000098
    assert pynvml.nvmlGpuInstanceProfileInfo_v2 == 0x02000098
    assert ctypes.sizeof(pynvml.c_nvmlComputeInstanceProfileInfo_v2_t) | 2 << 24 == 0x02000088
    assert pynvml.nvmlComputeInstanceProfileInfo_v2 == 0x02000088
    assert ctypes.sizeof(pynvml.c_nvmlMemory_v2_t) | 2 << 24 == pynvml.nvmlMemory_v2 == 0x02000028
    assert ctypes.sizeof(pynvml.nvmlPciInfo_t) == 68
    assert ctypes.sizeof(pynvml.c_nvmlGpuInstanceInfo_t) == 24
    assert ctypes.sizeof(pynvml.c_nvmlComputeInstanceInfo_t) == 32


def test_an_unknown_struct_version_is_refused(node: FakeNvmlNode) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    info = pynvml.c_nvmlGpuInstanceProfileInfo_v2_t()
    info.version = 0x01000098
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetGpuInstanceProfileInfoV")
    assert fn(h, 0, ctypes.byref(info)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    memory = pynvml.c_nvmlMemory_v2_t()
    memory.version = 2
    fn = pynvml._nvmlGetFunctionPointer("nvmlDeviceGetMemoryInfo_v2")
    assert fn(h, ctypes.byref(memory)) == pynvml.NVML_ERROR_ARGUMENT_VERSION_MISMATCH
    assert pynvml.nvmlDeviceGetMemoryInfo(h, version=pynvml.nvmlMemory_v2).total == 81559 << 20


def test_h100_answers_what_the_real_h100_answered(node: FakeNvmlNode) -> None:
    assert pynvml.nvmlSystemGetDriverVersion() == "580.159.04"
    assert pynvml.nvmlSystemGetCudaDriverVersion() == 13000
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    assert pynvml.nvmlDeviceGetName(h) == "NVIDIA H100 80GB HBM3"
    assert pynvml.nvmlDeviceGetBrand(h) == pynvml.NVML_BRAND_NVIDIA
    assert pynvml.nvmlDeviceGetArchitecture(h) == pynvml.NVML_DEVICE_ARCH_HOPPER
    assert pynvml.nvmlDeviceGetCudaComputeCapability(h) == (9, 0)
    assert pynvml.nvmlDeviceGetMemoryInfo(h).total == 81559 << 20
    assert pynvml.nvmlDeviceGetNumGpuCores(h) == 132 * 128
    assert pynvml.nvmlDeviceGetMigMode(h) == [0, 0]
    for index, (pid, name, mib, sms, count, engines, slices) in H100_LGIP.items():
        info = pynvml.nvmlDeviceGetGpuInstanceProfileInfo(h, index)
        got = (info.copyEngineCount, info.decoderCount, info.encoderCount, info.jpegCount, info.ofaCount)
        assert (info.id, info.name, info.memorySizeMB, info.multiprocessorCount) == (pid, name, mib, sms)
        assert (info.instanceCount, got, info.sliceCount) == (count, engines, slices)
    for index in (5, 6, 8):  # 8- and 6-slice profiles, 2g+me: not on an H100
        assert (
            nvml_code(pynvml.nvmlDeviceGetGpuInstanceProfileInfo, h, index) == pynvml.NVML_ERROR_NOT_SUPPORTED
        )
    # the placements are listed with MIG mode off, as the real GPU (MIG off) listed them
    got_placements = {pid: placements(h, pid) for pid in H100_LGIPP}
    assert got_placements == {pid: [(s, size) for s in starts] for pid, (starts, size) in H100_LGIPP.items()}
    assert sum(len(p) for p in got_placements.values()) == 25


def test_identity_pci_and_minor_numbers(node: FakeNvmlNode) -> None:
    uuids = set()
    for i in range(pynvml.nvmlDeviceGetCount()):
        h = pynvml.nvmlDeviceGetHandleByIndex(i)
        assert pynvml.nvmlDeviceGetMinorNumber(h) == i
        uuid = pynvml.nvmlDeviceGetUUID(h)
        uuids.add(uuid)
        assert uuid.startswith("GPU-") and len(uuid) == 40
        assert pynvml.nvmlDeviceGetHandleByUUID(uuid).contents is not None
        pci = pynvml.nvmlDeviceGetPciInfo(h)
        assert pci.busId == f"00000000:{pci.bus:02X}:00.0"
        assert pci.busIdLegacy == f"0000:{pci.bus:02X}:00.0"
        assert pci.pciDeviceId & 0xFFFF == 0x10DE
    assert len(uuids) == 3
    assert nvml_code(pynvml.nvmlDeviceGetHandleByUUID, "GPU-nope") == pynvml.NVML_ERROR_NOT_FOUND
    l4 = pynvml.nvmlDeviceGetHandleByIndex(2)
    assert pynvml.nvmlDeviceGetNumGpuCores(l4) // 128 == 58
    a100 = pynvml.nvmlDeviceGetHandleByIndex(1)
    assert pynvml.nvmlDeviceGetNumGpuCores(a100) // 64 == 108


def test_mig_mode_hopper_at_once_ampere_after_a_reset(node: FakeNvmlNode) -> None:
    h100, a100, l4 = (pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(3))
    assert pynvml.nvmlDeviceSetMigMode(h100, pynvml.NVML_DEVICE_MIG_ENABLE) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(h100) == [1, 1]
    status = pynvml.nvmlDeviceSetMigMode(a100, pynvml.NVML_DEVICE_MIG_ENABLE)
    assert status == pynvml.NVML_ERROR_RESET_REQUIRED
    assert pynvml.nvmlDeviceGetMigMode(a100) == [0, 1]
    assert nvml_code(create, a100, 19, 0, 1) == pynvml.NVML_ERROR_NOT_SUPPORTED  # still off
    assert reset_gpu(pynvml.nvmlLib, 1) == pynvml.NVML_SUCCESS
    assert pynvml.nvmlDeviceGetMigMode(a100) == [1, 1]
    assert nvml_code(pynvml.nvmlDeviceGetMigMode, l4) == pynvml.NVML_ERROR_NOT_SUPPORTED
    assert nvml_code(pynvml.nvmlDeviceSetMigMode, l4, 1) == pynvml.NVML_ERROR_NOT_SUPPORTED
    create_with_ci(h100, 9, 0, 4, 2)
    assert nvml_code(pynvml.nvmlDeviceSetMigMode, h100, 0) == pynvml.NVML_ERROR_IN_USE
    assert pynvml.nvmlDeviceGetMigMode(h100) == [1, 1]
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(h100) == 7
    assert pynvml.nvmlDeviceGetMaxMigDeviceCount(l4) == 0


def test_placements_ids_and_the_drivers_error_codes(node: FakeNvmlNode) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
    late = create(h, 19, 6, 1)
    early = create(h, 19, 0, 1)
    # ids come from what exists (the 1-slice range 7..14, lowest free), not from the placement
    assert (pynvml.nvmlGpuInstanceGetInfo(late).id, pynvml.nvmlGpuInstanceGetInfo(early).id) == (7, 8)
    info = pynvml.nvmlGpuInstanceGetInfo(early)
    assert (info.profileId, info.placement.start, info.placement.size) == (19, 0, 1)
    resources = pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    assert nvml_code(create, h, 19, 0, 1) == resources  # taken
    assert nvml_code(create, h, 9, 4, 4) == resources  # overlaps 6
    assert nvml_code(create, h, 0, 0, 8) == resources
    assert nvml_code(create, h, 9, 2, 4) == pynvml.NVML_ERROR_INVALID_ARGUMENT  # not a placement of 3g
    assert nvml_code(create, h, 9, 0, 2) == pynvml.NVML_ERROR_INVALID_ARGUMENT  # wrong size
    me = create(h, 20, 1, 1)
    assert nvml_code(create, h, 20, 2, 1) == resources  # one +me per GPU
    pynvml.nvmlGpuInstanceDestroy(me)
    pynvml.nvmlGpuInstanceDestroy(late)
    assert pynvml.nvmlGpuInstanceGetInfo(create(h, 15, 2, 2)).id == 3  # the 2-slice range starts at 3
    assert pynvml.nvmlGpuInstanceGetInfo(create(h, 19, 5, 1)).id == 7  # 7 is free again
    found = (pynvml.c_nvmlGpuInstance_t * 7)()
    count = ctypes.c_uint(0)
    pynvml.nvmlDeviceGetGpuInstances(h, 19, found, ctypes.byref(count))
    assert sorted(pynvml.nvmlGpuInstanceGetInfo(found[i]).placement.start for i in range(count.value)) == [
        0,
        5,
    ]
    assert nvml_code(pynvml.nvmlDeviceGetGpuInstanceById, h, 12) == pynvml.NVML_ERROR_NOT_FOUND


def test_compute_instances_in_use_and_mig_devices(node: FakeNvmlNode) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
    gi, ci = create_with_ci(h, 0, 0, 8, 4)  # 7g.80gb, 7c
    ci_info = pynvml.nvmlComputeInstanceGetInfo(ci)
    assert (ci_info.id, ci_info.profileId, ci_info.placement.size) == (0, 4, 7)
    assert nvml_code(pynvml.nvmlGpuInstanceDestroy, gi) == pynvml.NVML_ERROR_IN_USE
    profile = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 4, 0)
    assert (profile.sliceCount, profile.multiprocessorCount, profile.instanceCount) == (7, 132, 1)
    assert pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 0, 0).multiprocessorCount == 16
    whole = pynvml.nvmlGpuInstanceGetComputeInstanceProfileInfo(gi, 4, 0)
    assert nvml_code(pynvml.nvmlGpuInstanceCreateComputeInstance, gi, whole.id) == (
        pynvml.NVML_ERROR_INSUFFICIENT_RESOURCES
    )
    mig = pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)
    assert (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (0, 0)
    mig_uuid = pynvml.nvmlDeviceGetUUID(mig)
    assert mig_uuid.startswith("MIG-") and len(mig_uuid) == 40
    assert pynvml.nvmlDeviceGetName(mig) == "NVIDIA H100 80GB HBM3 MIG 7g.80gb"
    assert pynvml.nvmlDeviceGetMemoryInfo(mig).total == 81152 << 20
    assert pynvml.nvmlDeviceIsMigDeviceHandle(pynvml.nvmlDeviceGetHandleByUUID(mig_uuid)).value == 1
    assert nvml_code(pynvml.nvmlDeviceGetMigDeviceHandleByIndex, h, 1) == pynvml.NVML_ERROR_NOT_FOUND
    pynvml.nvmlComputeInstanceDestroy(ci)
    assert nvml_code(pynvml.nvmlDeviceGetUUID, mig) == pynvml.NVML_ERROR_INVALID_ARGUMENT  # gone
    pynvml.nvmlGpuInstanceDestroy(gi)
    assert pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_DISABLE) == pynvml.NVML_SUCCESS


def test_state_is_shared_across_processes_and_kept_across_restarts(node: FakeNvmlNode) -> None:
    h = pynvml.nvmlDeviceGetHandleByIndex(0)
    uuid = pynvml.nvmlDeviceGetUUID(h)
    other_process = textwrap.dedent(
        f"""\
        import ctypes, pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByUUID({uuid!r})
        pynvml.nvmlDeviceSetMigMode(h, pynvml.NVML_DEVICE_MIG_ENABLE)
        gi = pynvml.nvmlDeviceCreateGpuInstanceWithPlacement(
            h, 9, ctypes.byref(pynvml.c_nvmlGpuInstancePlacement_t(4, 4)))
        pynvml.nvmlGpuInstanceCreateComputeInstance(gi, 2)
        print(pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)))
        """
    )
    done = subprocess.run(
        [sys.executable, "-c", other_process], env=node.env(), capture_output=True, text=True, check=True
    )
    mig_uuid = done.stdout.strip()
    assert pynvml.nvmlDeviceGetMigMode(h) == [1, 1]
    assert pynvml.nvmlDeviceGetUUID(pynvml.nvmlDeviceGetMigDeviceHandleByIndex(h, 0)) == mig_uuid
    pynvml.nvmlShutdown()
    pynvml.nvmlInit()  # a restart: the instance is still there, with its ids and UUID
    mig = pynvml.nvmlDeviceGetHandleByUUID(mig_uuid)
    assert (pynvml.nvmlDeviceGetGpuInstanceId(mig), pynvml.nvmlDeviceGetComputeInstanceId(mig)) == (1, 0)
    state = read_state(node.state_file)
    assert state is not None and state[0].uuid == uuid and state[0].mig_current
    (gi,) = state[0].gpu_instances
    assert (gi.id, gi.profile_id, gi.start, gi.size) == (1, 9, 4, 4)
    assert [ci.uuid for ci in gi.compute_instances] == [mig_uuid]
    # the driver's /proc view: the nvidia-caps minors of /proc/driver/nvidia-caps/mig-minors (GPU 0, GI 1)
    caps = node.proc_root / "driver/nvidia/capabilities/gpu0/mig/gi1"
    assert (caps / "access").read_text().splitlines()[0] == "DeviceFileMinor: 12"
    assert (caps / "ci0" / "access").read_text().splitlines()[0] == "DeviceFileMinor: 13"
    assert "237 nvidia-caps" in (node.proc_root / "devices").read_text()


def test_a_state_file_of_another_version_is_refused(
    tmp_path: Path, capfd: pytest.CaptureFixture[str]
) -> None:
    fake = fake_node(tmp_path, H100_A100_L4)
    fake.state_dir.mkdir()
    fake.state_file.write_text("apiVersion: fake.tessera.dev/v0\nkind: FakeNvmlState\ngpus: []\n")
    with pynvml_on_fake(fake):
        assert nvml_code(pynvml.nvmlInit) == pynvml.NVML_ERROR_UNKNOWN
    assert "expected apiVersion fake.tessera.dev/v1" in capfd.readouterr().err


CLUSTER = "2b6d5c3a-0f1e-4d2c-9b8a-7766554433aa"
BAD_NODE_FILES = [
    "gpus: [{product: L4, colour: red}]",
    "gpus: [{product: L4, count: '2'}]",
    "gpus: [{product: L4, count: 0}]",
    "gpus: [{product: L4, migEnabled: true}]",
    "gpus: [{product: Voodoo2}]",
    "gpus: [{product: L4, count: 2, uuid: GPU-1}]",
    "gpus: [{product: L4, uuid: '1234'}]",
    "gpus: []",
    "gpus: [{count: 1}]",
    "gpuz: []",
    "gpus: [{product: H100-80GB-SXM, instances: [{profile: 1g.10gb, start: 0}]}]",
    "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: [{profile: 3g.40gb, start: 2}]}]",
    "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: [{profile: 9g.1tb, start: 0}]}]",
    "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: [{profile: 1g.10gb, start: 0, x: 1}]}]",
    "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: "
    "[{profile: 3g.40gb, start: 0}, {profile: 1g.10gb, start: 3}]}]",
    "gpus: [{product: L4, healthy: 'no'}]",
    "gpus: [{product: L4}]\ndriverVersion: 550",
    "gpus: {product: L4}",
    "gpus: [{product: L4, pcieRoot: pci15}]",
    "gpus: [{product: L4, pcieRoot: 15}]",
    "gpus: [{product: L4, numaNode: -1}]",
    "gpus: [{product: L4, nvlink: nvswitch}]",
    "gpus: [{product: L4, nvlink: bridge}]",
    f"gpus: [{{product: L4, nvlink: switch, fabric: {{clusterUuid: {CLUSTER.upper()}, cliqueId: 1}}}}]",
    f"gpus: [{{product: L4, fabric: {{clusterUuid: {CLUSTER}, cliqueId: 1}}}}]",
    f"gpus: [{{product: L4, nvlink: switch, fabric: {{clusterUuid: {CLUSTER}}}}}]",
    f"gpus: [{{product: L4, nvlink: switch, fabric: {{clusterUuid: {CLUSTER}, cliqueId: 4294967296}}}}]",
]


@pytest.mark.parametrize("body", BAD_NODE_FILES)
def test_bad_node_files_are_refused_as_the_simulated_backend_refuses_them(
    tmp_path: Path, capfd: pytest.CaptureFixture[str], body: str
) -> None:
    with pytest.raises(ConfigError) as sim:
        decode_node(yaml.safe_load(HEADER + body), default_name="node")
    with pynvml_on_fake(fake_node(tmp_path, HEADER + body)):
        assert nvml_code(pynvml.nvmlInit) == pynvml.NVML_ERROR_UNKNOWN
    err = capfd.readouterr().err
    # the same field and complaint, up to how each language prints the offending value
    assert str(sim.value).split(", got")[0].split(" (")[0] in err, (str(sim.value), err)


def test_without_a_node_file_the_plain_gpus_remain(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """What the interception library's tests rely on: FAKE_GPU_COUNT, FAKE_GPU_MEM_MB, a foreign process."""
    monkeypatch.setenv("FAKE_GPU_COUNT", "3")
    monkeypatch.setenv("FAKE_GPU_MEM_MB", "1024")
    code = textwrap.dedent(
        """\
        import pynvml
        pynvml.nvmlInit()
        h = pynvml.nvmlDeviceGetHandleByIndex(2)
        print(pynvml.nvmlDeviceGetCount(), pynvml.nvmlDeviceGetUUID(h), pynvml.nvmlDeviceGetName(h))
        m = pynvml.nvmlDeviceGetMemoryInfo(h)
        print(m.total >> 20, m.used >> 20, [p.pid for p in pynvml.nvmlDeviceGetComputeRunningProcesses(h)])
        try:
            pynvml.nvmlDeviceGetMigMode(h)
        except pynvml.NVMLError_NotSupported:
            print("no MIG")
        """
    )
    env = FakeNvmlNode(node_file=tmp_path / "none", state_dir=tmp_path).env()
    del env["FAKE_NVML_NODE"]
    out = subprocess.run([sys.executable, "-c", code], env=env, capture_output=True, text=True, check=True)
    lines = out.stdout.splitlines()
    assert lines[0] == "3 GPU-7e55e7a0-1234-4567-89ab-cdef00000002 Fake H100 80GB"
    assert lines[1:] == ["1024 1024 [4242]", "no MIG"]
    env["FAKE_NVML_FAIL"] = "1"
    failed = subprocess.run(
        [sys.executable, "-c", code], env=env, capture_output=True, text=True, check=False
    )
    assert failed.returncode != 0 and "Unknown Error" in failed.stderr


def test_the_product_table_is_generated_from_the_profiles() -> None:
    """interceptor/build/gen/fake_products.h is what gen_products.py makes of dra_driver/core/profiles.py
    now."""
    generator = REPO / "interceptor" / "fake" / "gen_products.py"
    made = subprocess.run(
        [sys.executable, str(generator)],
        env={"PYTHONPATH": str(REPO)},
        capture_output=True,
        text=True,
        check=True,
    ).stdout
    assert (REPO / "interceptor" / "build" / "gen" / "fake_products.h").read_text() == made
