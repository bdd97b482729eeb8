from __future__ import annotations

import uuid as uuidlib
from dataclasses import replace
from typing import Any

import pytest

from dra_driver.core import config as cfg
from dra_driver.core.allocation import LibrarySettings
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mps, parse_device_name, vgpu
from dra_driver.core.families.base import Allotment, GpuOffer, NodeRecords, SliceOccupancy
from dra_driver.core.families.capacity import SharedLimits
from dra_driver.core.families.mps import MpsClient, MpsConfig, MpsPipe
from dra_driver.core.families.protocol import NamedVisible, Placing, TimeSliced
from dra_driver.core.families.published import counter_totals
from dra_driver.core.settings import family_settings
from dra_driver.libtessera.limits_file import GpuLimitLine, LibraryLimits
from dra_driver.vocabulary.container import ContainerEdits, DeviceNode, Mount
from dra_driver.vocabulary.errors import ClaimError, ConfigError, InvalidNameError
from dra_driver.vocabulary.inventory import Gpu
from dra_driver.vocabulary.names import CONFIG_API_VERSION, DeviceName, GpuUUID
from tests.support.claim_models import claim, config, result
from tests.support.family_plans import H100, error_of, plan
from tests.support.inventories import make_gpu, make_inventory

GiB = 1 << 30
MiB = 1 << 20
G0, G1 = H100.gpus[0].uuid, H100.gpus[1].uuid


def mps_result(gpu: int = 0, *, memory: str = "20Gi", cores: str = "50", request: str = "gpu") -> Any:
    return result(
        f"gpu-{gpu}-mps",
        request=request,
        share_id=str(uuidlib.uuid4())[:8],
        consumed={"memory": memory, "cores": cores},
    )


def planned(memory: str = "20Gi", cores: str = "50", *configs: Any) -> mps.Planned:
    (d,) = plan(claim(mps_result(0, memory=memory, cores=cores), configs=configs)).devices
    return d


def pre_volta(index: int = 0) -> Gpu:
    """A GPU of compute capability 6.1 (Pascal): no table product is that old."""
    return replace(make_gpu(index, "L4"), cuda_compute_capability="6.1")


def offer(gpu: Gpu, *, shares: int = 10, degraded: bool = False, admin: bool = False) -> GpuOffer:
    inventory = make_inventory(gpu)
    held = gpu.mig_instances if admin else ()
    return GpuOffer(
        gpu=gpu,
        inventory=inventory,
        settings=family_settings(vgpuShares=shares),
        admin=held,
        counters=None if degraded else counter_totals(gpu, held),
    )


# ---- names and offers ---------------------------------------------------------------------------------


def test_names() -> None:
    assert mps.FAMILY.parse_name("mps") == () and mps.FAMILY.parse_name("vgpu") is None
    assert mps.FAMILY.parse_name("") is None
    parsed = parse_device_name("gpu-3-mps")
    assert (parsed.family, parsed.index) == (mps.FAMILY, 3)
    for bad in ("gpu-3-mps-0", "gpu-3-mpsx"):
        with pytest.raises(InvalidNameError):
            parse_device_name(bad)


@pytest.mark.parametrize(
    ("capability", "devices"),
    [("9.0", ("gpu-2-mps",)), ("7.0", ("gpu-2-mps",)), ("10.0", ("gpu-2-mps",)), ("6.1", ()), ("", ())],
)
def test_only_volta_and_newer_can_have_an_mps_device(capability: str, devices: tuple[str, ...]) -> None:
    # "10.0" is newer than "7.0" although it sorts before it as text
    gpu = replace(make_gpu(2, "H100-80GB-SXM"), cuda_compute_capability=capability)
    assert mps.FAMILY.possible_devices(gpu) == devices
    assert tuple(d["name"] for d in mps.FAMILY.offer(offer(gpu))) == devices


def test_one_multi_allocatable_device_per_gpu_with_the_vgpu_capacity() -> None:
    gpu = make_gpu(1, "H100-80GB-SXM")
    (device,) = mps.FAMILY.offer(offer(gpu))
    assert device["name"] == "gpu-1-mps" and device["allowMultipleAllocations"] is True
    attributes = device["attributes"]
    assert attributes["gpu.tessera.dev/type"] == {"string": "mps"}
    assert (
        attributes["gpu.tessera.dev/uuid"] == attributes["gpu.tessera.dev/parentUUID"] == {"string": gpu.uuid}
    )
    memory = f"{gpu.memory_bytes // MiB}Mi"
    assert device["capacity"] == {
        "memory": {
            "value": memory,
            "requestPolicy": {"default": memory, "validRange": {"min": "1Mi", "max": memory, "step": "1Mi"}},
        },
        "cores": {
            "value": "100",
            "requestPolicy": {"default": "0", "validRange": {"min": "0", "max": "100", "step": "1"}},
        },
        "shares": {"value": "10", "requestPolicy": {"default": "1", "validValues": ["1"]}},
    }
    (shared,) = vgpu.FAMILY.offer(offer(gpu))
    assert device["capacity"] == shared["capacity"]


def test_it_consumes_the_whole_gpus_counters_like_a_whole_gpu() -> None:
    o = offer(make_gpu(0, "H100-80GB-SXM"))
    (device,) = mps.FAMILY.offer(o)
    (gpu,) = whole.FAMILY.offer(o)
    assert device["consumesCounters"] == gpu["consumesCounters"]
    (use,) = device["consumesCounters"]
    assert use["counterSet"] == "gpu-0-counters"
    assert set(use["counters"]) == set(o.counters or {})


@pytest.mark.parametrize(("shares", "clients"), [(1, "1"), (10, "10"), (48, "48"), (49, "48"), (64, "48")])
def test_shares_follow_the_node_setting_up_to_the_48_clients_of_one_daemon(shares: int, clients: str) -> None:
    (device,) = mps.FAMILY.offer(offer(make_gpu(0, "H100-80GB-SXM"), shares=shares))
    assert device["capacity"]["shares"]["value"] == clients


def test_not_offered_without_counters_or_where_the_gpu_cannot_be_shared() -> None:
    assert mps.FAMILY.offer(offer(make_gpu(0, "H100-80GB-SXM"), degraded=True)) == ()
    # an administrator's MIG instance on the GPU, or MIG mode on an Ampere GPU (no toggling without a reset)
    admin = make_gpu(0, "H100-80GB-SXM", mig_enabled=True, instances=(("3g.40gb", 0),))
    assert mps.FAMILY.offer(offer(admin, admin=True)) == ()
    assert mps.FAMILY.offer(offer(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True))) == ()
    # Hopper with MIG mode on and no administrator's instance: Tessera switches it off again, so it is offered
    assert len(mps.FAMILY.offer(offer(make_gpu(0, "H100-80GB-SXM", mig_enabled=True)))) == 1
    assert len(mps.FAMILY.offer(offer(make_gpu(0, "A100-SXM4-80GB")))) == 1


def test_its_occupancy_is_the_whole_gpu_shared_with_mps_only() -> None:
    h100 = make_gpu(0, "H100-80GB-SXM")
    fp = mps.FAMILY.occupancy((), h100)
    assert fp == SliceOccupancy(family=mps.NAME, slices=frozenset(range(8)), shared=True, what="an MPS share")
    assert not fp.excludes(mps.FAMILY.occupancy((), h100))
    assert fp.excludes(vgpu.FAMILY.occupancy((), h100))
    assert fp.excludes(whole.FAMILY.occupancy((), h100))
    assert mps.FAMILY.occupancy((), make_gpu(0, "L4")).slices == frozenset({0})  # no MIG: one slice


# ---- config --------------------------------------------------------------------------------------------


def mps_config(**fields: object) -> cfg.OpaqueConfig:
    params = {"apiVersion": CONFIG_API_VERSION, "kind": "MpsConfig", **fields}
    return cfg.OpaqueConfig(cfg.ConfigSource.FROM_CLAIM, (), params, 2)


def test_config_decodes_log_level_from_a_claim() -> None:
    decoded = cfg.decode(mps_config(logLevel=4))
    assert decoded.family == mps.NAME and decoded.values == {"log_level": 4}
    assert cfg.decode(mps_config()).values == {}
    assert mps.FAMILY.config.kind == "MpsConfig" and mps.FAMILY.config.type is MpsConfig


@pytest.mark.parametrize(
    ("fields", "needle"),
    [
        (
            {"logLevel": 5},
            "config[2] (FromClaim) opaque.parameters.logLevel: 5 is out of range; use an integer 0-4",
        ),
        ({"logLevel": -1}, ".logLevel: -1 is out of range"),
        ({"logLevel": "2"}, ".logLevel: must be an integer"),
        ({"logLevel": True}, ".logLevel: must be an integer"),
        # vgpu's fields mean nothing to MPS: MPS divides the SMs and has no priority
        ({"priority": 0}, ".priority: unknown field in MpsConfig"),
        ({"smLimitPolicy": "force"}, ".smLimitPolicy: unknown field in MpsConfig"),
    ],
)
def test_bad_configs_name_the_field(fields: dict[str, object], needle: str) -> None:
    with pytest.raises(ConfigError) as info:
        cfg.decode(mps_config(**fields))
    assert needle in str(info.value)


def test_a_claims_mps_config_applies_and_other_kinds_are_skipped() -> None:
    d = planned("20Gi", "50", config("MpsConfig", logLevel=3), config("VgpuConfig", logLevel=0))
    assert d.config == MpsConfig(log_level=3)
    assert planned("20Gi", "50", config("VgpuConfig", logLevel=0)).config == MpsConfig()
    assert "logLevel: 5 is out of range" in error_of(
        claim(mps_result(), configs=[config("MpsConfig", logLevel=5)])
    )


def test_log_level_must_agree_with_a_vgpu_device_of_the_same_claim() -> None:
    c = claim(
        mps_result(0, request="a"),
        result("gpu-1-vgpu", request="b", share_id="s", consumed={"memory": "1Gi", "cores": "10"}),
        configs=[config("MpsConfig", logLevel=3), config("VgpuConfig", logLevel=2)],
    )
    assert "sets logLevel 2, request a sets 3" in error_of(c)


# ---- planning ------------------------------------------------------------------------------------------


def test_limits_come_from_consumed_capacity() -> None:
    r = mps_result(1, memory="20Gi", cores="30")
    p = plan(claim(r))
    (d,) = p.devices
    assert (d.family, d.device, d.gpu_index, d.gpu_uuid) == (mps.NAME, "gpu-1-mps", 1, G1)
    assert d.spec == SharedLimits(memory_bytes=20 * GiB, cores=30)
    assert d.share_id == r.share_id and d.config == MpsConfig()
    assert p.library == LibrarySettings(policy="default", log_level=1)


@pytest.mark.parametrize(
    ("consumed", "needle"),
    [
        (None, "mps device gpu-0-mps (request gpu) has no consumedCapacity"),
        ({"memory": "1Gi"}, "mps device gpu-0-mps: consumedCapacity has no 'cores'"),
        (
            {"memory": "81Gi", "cores": "1"},
            "consumed memory 86973087744 bytes is outside the device's policy",
        ),
        ({"memory": "1Gi", "cores": "101"}, "consumed cores 101 is outside the device's policy (0…100)"),
    ],
)
def test_bad_capacity(consumed: dict[str, str] | None, needle: str) -> None:
    assert needle in error_of(claim(result("gpu-0-mps", share_id="s", consumed=consumed)))


def test_not_on_a_gpu_in_mig_mode() -> None:
    inv = make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True))
    assert "GPU 0 is in MIG mode, so it cannot be used as an MPS share" in error_of(claim(mps_result(0)), inv)


def test_not_on_a_gpu_older_than_volta() -> None:
    message = error_of(claim(mps_result(0)), make_inventory(pre_volta()))
    assert "GPU 0 (compute capability 6.1) is older than Volta" in message
    assert "compute capability 7.0 or newer" in message


def test_a_claim_holds_one_mps_device() -> None:
    c = claim(mps_result(0, request="a"), mps_result(1, request="b"))
    assert "devices gpu-0-mps, gpu-1-mps: a claim may hold one MPS device" in error_of(c)
    # one MPS device beside another family's is fine
    p = plan(claim(mps_result(0, request="a"), result("gpu-1", request="b")))
    assert [d.family for d in p.devices] == [mps.NAME, whole.NAME]


# ---- records -------------------------------------------------------------------------------------------


def test_records_name_the_gpu_and_the_thread_percentage() -> None:
    p = plan(claim(mps_result(1, cores="30")))
    # unlike a vgpu share, an MPS client takes no slot, so other claims' clients of the GPU change nothing
    (record,) = mps.FAMILY.records(p.devices, NodeRecords(others=(MpsClient(G1, 70),)))
    assert record == MpsClient(G1, 30)
    assert mps.FAMILY.record_gpus((record, MpsClient(G0))) == {G0, G1}
    # an MPS client holds no MIG placement and takes no time-division slot
    assert not isinstance(mps.FAMILY, Placing) and not isinstance(mps.FAMILY, TimeSliced)
    assert mps.FAMILY.record_key == "mps"  # the checkpoint's key: on-disk format


def test_record_round_trip_and_strict_decoding() -> None:
    client = MpsClient(GpuUUID("GPU-x"), 25)
    assert mps.FAMILY.encode_record(client) == {"gpuUUID": "GPU-x", "cores": 25}
    assert mps.FAMILY.decode_record(mps.FAMILY.encode_record(client)) == client
    # a record written before the thread percentage was recorded
    assert mps.FAMILY.decode_record({"gpuUUID": "GPU-x"}) == MpsClient(GpuUUID("GPU-x"), 0)
    for bad, needle in (
        ({}, "needs a string 'gpuUUID'"),
        ({"gpuUUID": ""}, "needs a string 'gpuUUID'"),
        ({"gpuUUID": 5}, "needs a string 'gpuUUID'"),
        ({"gpuUUID": "GPU-x", "cores": 101}, "'cores' of an MPS record must be an integer from 0 to 100"),
        ({"gpuUUID": "GPU-x", "cores": -1}, "must be an integer from 0 to 100"),
        ({"gpuUUID": "GPU-x", "cores": True}, "must be an integer from 0 to 100"),
        ({"gpuUUID": "GPU-x", "cores": "30"}, "must be an integer from 0 to 100"),
    ):
        with pytest.raises(ValueError, match=needle):
            mps.FAMILY.decode_record(bad)


def test_allotment_is_the_limits_files_memory_and_the_recorded_thread_percentage() -> None:
    gpu, device = H100.gpus[1], DeviceName("gpu-1-mps")
    records = (MpsClient(G0, 70), MpsClient(G1, 30))
    line = GpuLimitLine(gpu.uuid, memory_bytes=4 * GiB, cores=0, priority=1)
    assert mps.FAMILY.allotment(device, gpu, records, line) == Allotment(4 * GiB, 0.3)
    # no thread percentage: the client may use every SM; no limits line: the whole memory
    assert mps.FAMILY.allotment(device, gpu, (MpsClient(G1, 0),), None) == Allotment(gpu.memory_bytes, 1.0)
    line = GpuLimitLine(gpu.uuid, memory_bytes=GiB, cores=0, priority=1)
    assert mps.FAMILY.allotment(device, gpu, (MpsClient(G0, 70),), line) == Allotment(GiB, 1.0)


# ---- what the container gets ---------------------------------------------------------------------------


def test_the_library_holds_memory_only_and_takes_no_time_slot() -> None:
    d = planned("20Gi", "50", config("MpsConfig", logLevel=2))
    assert mps.FAMILY.library(d) == LibraryLimits(
        gpu_index=0, gpu_uuid=G0, memory_bytes=20 * GiB, cores=0, time_sliced=False, log_level=2
    )
    # the claim's status still names the share it was given
    assert mps.FAMILY.status(d, None) == {"limits": {"memory": "20480Mi", "cores": 50}}


def test_claim_edits_make_the_container_a_client_of_its_gpus_daemon() -> None:
    d = planned("1536Mi", "30")
    pipe = MpsPipe(host_dir="/var/lib/tessera/mps/claims/u1/GPU-0")
    inside = f"/var/run/tessera/mps/{G0}"
    assert mps.container_pipe_dir(G0) == inside
    assert mps.FAMILY.claim_edits((d,), {d.device: pipe}) == ContainerEdits(
        env=(
            f"CUDA_MPS_PIPE_DIRECTORY={inside}",
            "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1536M",
            "CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=30",
        ),
        mounts=(
            Mount(host_path=pipe.host_dir, container_path=inside, options=("ro", "nosuid", "nodev", "bind")),
        ),
    )


def test_no_thread_percentage_without_an_sm_share() -> None:
    d = planned("1Gi", "0")
    edits = mps.FAMILY.claim_edits((d,), {d.device: MpsPipe(host_dir="/h")})
    assert not any(e.startswith("CUDA_MPS_ACTIVE_THREAD_PERCENTAGE=") for e in edits.env)
    assert "CUDA_MPS_PINNED_DEVICE_MEM_LIMIT=0=1024M" in edits.env


@pytest.mark.parametrize("made", [{}, {"gpu-1-mps": MpsPipe(host_dir="/h")}])
def test_claim_edits_need_the_daemons_client_directory(made: dict[str, MpsPipe]) -> None:
    d = planned()
    with pytest.raises(ClaimError, match="device gpu-0-mps: no MPS control daemon was started for it"):
        mps.FAMILY.claim_edits((d,), {DeviceName(k): v for k, v in made.items()})


def test_device_edits_are_the_gpus_node_and_no_visible_id() -> None:
    d = planned()
    gpu = H100.gpus[0]
    edits = mps.FAMILY.device_edits(d, gpu, MpsPipe(host_dir="/h"))
    assert edits == ContainerEdits(device_nodes=(DeviceNode("/dev/nvidia0", 195, 0),))
    assert not isinstance(mps.FAMILY, NamedVisible)  # CUDA sees the GPU without naming it
