from __future__ import annotations

from dataclasses import replace

from cdi.edits import HostLayout, cdi_ids, claim_spec, library_ordinals
from dra_driver.core import families
from dra_driver.core.allocation import ClaimPlan, LibrarySettings
from dra_driver.core.config_schema import SmLimitPolicy
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, mps, vgpu
from dra_driver.core.families.base import AnyPlanned, PlannedDevice
from dra_driver.core.families.capacity import SharedLimits
from dra_driver.core.families.mig import MigAction, MigPlan
from dra_driver.core.families.vgpu import VgpuConfig
from dra_driver.core.profiles import product
from dra_driver.vocabulary.container import DeviceNode, Mount
from dra_driver.vocabulary.inventory import DriverFiles, DriverMount, Gpu, Inventory, MigInstance, Placement
from dra_driver.vocabulary.names import ClaimUID, DeviceName, Family, GpuUUID

UID = ClaimUID("0b1c2d3e-aaaa-bbbb-cccc-000000000001")
CTL = (DeviceNode("/dev/nvidiactl", 195, 255), DeviceNode("/dev/nvidia-uvm", 510, 0))
HOST = HostLayout(
    library_path="/opt/tessera/libtessera.so",
    claim_dir="/var/lib/tessera/claims/x",
    driver_library_dirs=("/usr/lib/nvidia",),
)


def gpu(i: int) -> Gpu:
    p = product("H100-80GB-SXM")
    return Gpu(
        index=i,
        uuid=GpuUUID(f"GPU-{i}"),
        product_name=p.product_name,
        brand="Nvidia",
        architecture=p.architecture,
        cuda_compute_capability="9.0",
        memory_bytes=p.memory_bytes,
        multiprocessors=132,
        pci_bus_id=f"0000:{i}",
        device_node=DeviceNode(f"/dev/nvidia{i}", 195, i),
        mig_capable=True,
        mig_profiles=p.mig_profiles,
    )


INV = Inventory(
    driver_version="550", cuda_driver_version="12.4", gpus=(gpu(0), gpu(1), gpu(2)), control_nodes=CTL
)


def planned(
    family: Family,
    i: int,
    *,
    name: str,
    request: str = "r",
    share: str | None = None,
    spec: object = None,
    config: object = None,
) -> AnyPlanned:
    """A device as plan_claim leaves it: planned by its family, with its library limits asked once."""
    configs = {whole.NAME: whole.GpuConfig(), vgpu.NAME: VgpuConfig(), mig.NAME: mig.MigConfig()}
    d: AnyPlanned = PlannedDevice(
        request=request,
        device=DeviceName(name),
        family=family,
        gpu_index=i,
        gpu_uuid=GpuUUID(f"GPU-{i}"),
        share_id=share,
        config=config if config is not None else configs[family],
        spec=spec,
    )
    return replace(d, library_limits=families.library_limits(d))


def claim_plan(*devices: AnyPlanned, library: LibrarySettings | None = None) -> ClaimPlan:
    return ClaimPlan(uid=UID, namespace="ns", name="c", pool="node", devices=devices, library=library)


def test_whole_gpu_gets_its_node_control_nodes_and_driver_libraries() -> None:
    plan = claim_plan(planned(whole.NAME, 1, name="gpu-1"))
    spec = claim_spec(plan=plan, inventory=INV, host=HOST)
    (dev,) = spec.devices
    assert dev.name == f"{UID}-gpu-1"
    assert dev.container_edits.device_nodes == (DeviceNode("/dev/nvidia1", 195, 1),)
    assert dev.container_edits.env == ()
    assert [n.path for n in spec.container_edits.device_nodes] == ["/dev/nvidiactl", "/dev/nvidia-uvm"]
    assert spec.container_edits.mounts == (
        Mount("/usr/lib/nvidia", "/usr/lib/nvidia", options=("ro", "nosuid", "nodev", "bind")),
    )
    assert not any(e.startswith("LD_PRELOAD=") for e in spec.container_edits.env)
    assert spec.kind == "k8s.gpu.tessera.dev/claim"
    assert cdi_ids(plan, plan.devices[0]) == (f"k8s.gpu.tessera.dev/claim={UID}-gpu-1",)


def test_vgpu_carries_the_interception_library_contract() -> None:
    config = VgpuConfig(sm_limit_policy=SmLimitPolicy.FORCE, priority=0, log_level=3)
    plan = claim_plan(
        planned(vgpu.NAME, 2, name="gpu-2-vgpu", share="s2", spec=SharedLimits(8 << 30, 25), config=config),
        planned(vgpu.NAME, 0, name="gpu-0-vgpu", share="s0", spec=SharedLimits(1 << 30, 0), config=config),
        library=LibrarySettings(policy="force", log_level=3),
    )
    spec = claim_spec(plan=plan, inventory=INV, host=HOST)
    assert [d.name for d in spec.devices] == [f"{UID}-gpu-2-vgpu-s2", f"{UID}-gpu-0-vgpu-s0"]
    # HAMi indexes by position within the claim: GPU 0 is index 0, GPU 2 index 1
    assert library_ordinals(plan) == {"gpu-0-vgpu": 0, "gpu-2-vgpu": 1}
    assert spec.devices[0].container_edits.env == (
        "CUDA_DEVICE_MEMORY_LIMIT_1=8192m",
        "CUDA_DEVICE_SM_LIMIT_1=25",
    )
    assert spec.devices[1].container_edits.env == (
        "CUDA_DEVICE_MEMORY_LIMIT_0=1024m",
        "CUDA_DEVICE_SM_LIMIT_0=0",
    )
    assert [n.path for n in spec.devices[0].container_edits.device_nodes] == ["/dev/nvidia2"]
    claim_dir = f"/var/run/tessera/claims/{UID}"
    env = dict(e.split("=", 1) for e in spec.container_edits.env)
    assert env == {
        "NVIDIA_VISIBLE_DEVICES": "void",
        "LD_PRELOAD": "/usr/local/tessera/lib/libtessera.so",
        "TESSERA_CLAIM_DIRS": claim_dir,
        "TESSERA_CLAIM_DIR_" + UID.replace("-", "_"): claim_dir,
        "CUDA_DEVICE_MEMORY_SHARED_CACHE": f"{claim_dir}/region",
        "GPU_CORE_UTILIZATION_POLICY": "force",
        "CUDA_TASK_PRIORITY": "0",
        "LIBCUDA_LOG_LEVEL": "3",
    }
    mounts = {m.container_path: m for m in spec.container_edits.mounts}
    lib = mounts["/usr/local/tessera/lib/libtessera.so"]
    assert lib.host_path == HOST.library_path and "ro" in lib.options
    cdir = mounts[claim_dir]
    assert cdir.host_path == f"{HOST.claim_dir}/shared" and "rw" in cdir.options
    # the limits reach the container read-only, mounted after (over) the read-write claim dir
    limits = mounts[f"{claim_dir}/limits"]
    assert (
        limits.host_path == f"{HOST.claim_dir}/limits"
        and "ro" in limits.options
        and "rw" not in limits.options
    )
    order = [m.container_path for m in spec.container_edits.mounts]
    assert order.index(claim_dir) < order.index(f"{claim_dir}/limits")


def test_the_spec_says_the_limits_the_claim_was_planned_with() -> None:
    """The limits are asked of the family once, when the claim is planned; the spec reads them from the plan
    (the limits file does too), so the two can never say different things."""
    d = planned(vgpu.NAME, 0, name="gpu-0-vgpu", share="s0", spec=SharedLimits(1 << 30, 10))
    assert d.library_limits is not None
    planned_limits = replace(d.library_limits, memory_bytes=3 << 30, cores=40, priority=0)
    plan = claim_plan(replace(d, library_limits=planned_limits), library=LibrarySettings("default", 1))
    spec = claim_spec(plan=plan, inventory=INV, host=HOST)
    assert spec.devices[0].container_edits.env == (
        "CUDA_DEVICE_MEMORY_LIMIT_0=3072m",
        "CUDA_DEVICE_SM_LIMIT_0=40",
    )
    assert "CUDA_TASK_PRIORITY=0" in spec.container_edits.env


def test_mig_gets_parent_node_caps_nodes_and_the_mig_uuid() -> None:
    caps = (
        DeviceNode("/dev/nvidia-caps/nvidia-cap21", 237, 21),
        DeviceNode("/dev/nvidia-caps/nvidia-cap22", 237, 22),
    )
    created = MigInstance(
        GpuUUID("GPU-1"), 9, "3g.40gb", 4, 4, gi_id=2, ci_id=0, uuid="MIG-abc", device_nodes=caps
    )
    static = MigInstance(GpuUUID("GPU-0"), 19, "1g.10gb", 0, 1, gi_id=7, ci_id=0, uuid="MIG-admin")
    plan = claim_plan(
        planned(
            mig.NAME,
            1,
            name="gpu-1-mig-3g40gb-4",
            spec=MigPlan(Placement(GpuUUID("GPU-1"), 9, 4), "3g.40gb", 4, MigAction.CREATE),
        ),
        planned(
            mig.NAME,
            0,
            name="gpu-0-mig-1g10gb-0",
            spec=MigPlan(Placement(GpuUUID("GPU-0"), 19, 0), "1g.10gb", 1, MigAction.STATIC, static),
        ),
        planned(whole.NAME, 2, name="gpu-2"),
    )
    spec = claim_spec(plan=plan, inventory=INV, host=HOST, made={DeviceName("gpu-1-mig-3g40gb-4"): created})
    assert [n.path for n in spec.devices[0].container_edits.device_nodes] == [
        "/dev/nvidia1",
        "/dev/nvidia-caps/nvidia-cap21",
        "/dev/nvidia-caps/nvidia-cap22",
    ]
    assert spec.devices[0].container_edits.device_nodes[1].major == 237
    assert [n.path for n in spec.devices[1].container_edits.device_nodes] == ["/dev/nvidia0"]
    assert "CUDA_VISIBLE_DEVICES=MIG-abc,MIG-admin,GPU-2" in spec.container_edits.env


def test_mig_without_an_instance_is_an_error() -> None:
    plan = claim_plan(
        planned(
            mig.NAME,
            1,
            name="gpu-1-mig-3g40gb-4",
            spec=MigPlan(Placement(GpuUUID("GPU-1"), 9, 4), "3g.40gb", 4, MigAction.CREATE),
        )
    )
    try:
        claim_spec(plan=plan, inventory=INV, host=HOST)
    except Exception as e:
        assert "no MIG instance was created" in str(e)
    else:
        raise AssertionError("expected an error")


DRIVER = DriverFiles(
    common=(
        DriverMount("/run/nvidia/driver/usr/lib64/libcuda.so.580", "/usr/lib64/libcuda.so.580"),
        DriverMount("/run/nvidia/driver/usr/lib64/libcuda.so.580", "/usr/lib64/libcuda.so.1"),
        DriverMount("/run/nvidia/driver/usr/bin/nvidia-smi", "/usr/bin/nvidia-smi"),
    ),
    tools=(
        (
            mps.NAME,
            (
                DriverMount(
                    "/run/nvidia/driver/usr/bin/nvidia-cuda-mps-control", "/usr/bin/nvidia-cuda-mps-control"
                ),
            ),
        ),
    ),
)
RO = ("ro", "nosuid", "nodev", "bind")


def test_every_claim_gets_the_drivers_files_read_only_and_no_gpu_from_the_toolkit() -> None:
    host = HostLayout(library_path="/l", claim_dir="/c", driver_files=DRIVER)
    spec = claim_spec(plan=claim_plan(planned(whole.NAME, 1, name="gpu-1")), inventory=INV, host=host)
    assert spec.container_edits.mounts == tuple(
        Mount(f.host_path, f.container_path, options=RO) for f in DRIVER.common
    )
    assert "NVIDIA_VISIBLE_DEVICES=void" in spec.container_edits.env


def test_mps_claims_also_get_the_mps_tools() -> None:
    host = HostLayout(library_path="/l", claim_dir="/c", driver_files=DRIVER)
    device = planned(
        mps.NAME, 0, name="gpu-0-mps", share="m0", spec=SharedLimits(1 << 30, 30), config=mps.MpsConfig()
    )
    plan = claim_plan(device, library=LibrarySettings(policy="default", log_level=2))
    made = {device.device: mps.MpsPipe(host_dir="/var/lib/tessera/mps/GPU-0/pipe")}
    spec = claim_spec(plan=plan, inventory=INV, host=host, made=made)
    paths = [m.container_path for m in spec.container_edits.mounts]
    assert "/usr/bin/nvidia-cuda-mps-control" in paths
    assert "/usr/lib64/libcuda.so.1" in paths
