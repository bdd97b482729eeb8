"""What the readers beside prepare learn of each prepared claim: every family says what its device holds."""

from __future__ import annotations

from pathlib import Path

import pytest

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, mps, vgpu
from dra_driver.core.families.mig import MigRecord
from dra_driver.core.families.mps import MpsClient
from dra_driver.libtessera.limits_file import GpuLimitLine, LimitsFile, render_limits
from dra_driver.libtessera.names import LIMITS_FILE_NAME
from dra_driver.vocabulary.inventory import Inventory, Placement
from dra_driver.vocabulary.names import ClaimUID, Family, GpuUUID
from kubelet_plugin.claims.prepared_claims import prepared_claims
from kubelet_plugin.record.checkpoint import Checkpoint, ClaimEntry, ClaimState, records_of
from kubelet_plugin.record.results import PreparedDevice

NODE_FILE = Path(__file__).resolve().parents[4] / "e2e" / "nodes" / "realnode-h100x2.yaml"
GiB = 1 << 30


@pytest.fixture(scope="module")
def inventory() -> Inventory:
    return SimulatedBackend.from_file(node_file=NODE_FILE, state_file=None).inventory()


def entry(
    uid: str, *names: str, records: dict[Family, list[object]] | None = None, claim_dir: bool = False
) -> ClaimEntry:
    devices = tuple(PreparedDevice(("r",), "node", n, (f"cdi/{n}",)) for n in names)
    return ClaimEntry(
        uid=ClaimUID(uid),
        namespace="ns",
        name=uid,
        state=ClaimState.PREPARE_COMPLETED,
        devices=devices,
        records=records_of(records or {}),
        has_claim_dir=claim_dir,
    )


def limits(tmp_path: Path, uid: str, *lines: GpuLimitLine) -> None:
    (tmp_path / uid).mkdir()
    text = render_limits(LimitsFile(policy="default", log_level=1, gpus=lines))
    (tmp_path / uid / LIMITS_FILE_NAME).write_text(text)


def test_each_family_reports_what_its_device_holds(inventory: Inventory, tmp_path: Path) -> None:
    g0, g1 = inventory.gpus
    limits(tmp_path, "v", GpuLimitLine(g0.uuid, 10 * GiB, 20, 1))
    limits(tmp_path, "m", GpuLimitLine(g0.uuid, 4 * GiB, 0, 1))
    h100 = g1.profile_by_name("3g.40gb")
    assert h100 is not None
    record = MigRecord("gpu-1-mig-3g40gb-4", Placement(g1.uuid, h100.profile_id, 4), "3g.40gb", uuid="MIG-x")
    cp = Checkpoint(
        boot_id="b",
        claims={
            ClaimUID("w"): entry("w", "gpu-1"),
            ClaimUID("v"): entry("v", "gpu-0-vgpu", claim_dir=True),
            ClaimUID("m"): entry(
                "m", "gpu-0-mps", records={mps.NAME: [MpsClient(g0.uuid, 30)]}, claim_dir=True
            ),
            ClaimUID("g"): entry("g", "gpu-1-mig-3g40gb-4", records={mig.NAME: [record]}),
        },
    )
    found = {c.uid: c.devices for c in prepared_claims(cp, inventory, tmp_path)}

    (w,) = found[ClaimUID("w")]
    assert (w.family, w.memory_limit_bytes, w.cores_ratio, w.metered) == (
        whole.NAME,
        g1.memory_bytes,
        1.0,
        False,
    )
    (v,) = found[ClaimUID("v")]
    assert (v.family, v.memory_limit_bytes, v.cores_ratio, v.metered) == (vgpu.NAME, 10 * GiB, 0.2, True)
    (m,) = found[ClaimUID("m")]  # the library holds the memory, MPS the thread percentage
    assert (m.family, m.memory_limit_bytes, m.cores_ratio, m.metered) == (mps.NAME, 4 * GiB, 0.3, True)
    (g,) = found[ClaimUID("g")]
    assert (g.family, g.mig_profile, g.mig_uuid) == (mig.NAME, "3g.40gb", "MIG-x")
    assert g.memory_limit_bytes == h100.memory_mib << 20
    assert g.cores_ratio == h100.multiprocessors / g1.multiprocessors


def test_an_unreadable_limits_file_reports_no_limits(inventory: Inventory, tmp_path: Path) -> None:
    (tmp_path / "v").mkdir()
    (tmp_path / "v" / LIMITS_FILE_NAME).write_text("version 1\ngpu short\n")
    cp = Checkpoint(boot_id="b", claims={ClaimUID("v"): entry("v", "gpu-0-vgpu", claim_dir=True)})
    ((v,),) = [c.devices for c in prepared_claims(cp, inventory, tmp_path)]
    assert (v.memory_limit_bytes, v.cores_ratio, v.metered) == (0, 0.0, False)


def test_an_mps_record_without_a_percentage_reads_as_none() -> None:
    assert mps.FAMILY.decode_record({"gpuUUID": "GPU-1"}) == MpsClient(GpuUUID("GPU-1"), 0)
    with pytest.raises(ValueError, match="cores"):
        mps.FAMILY.decode_record({"gpuUUID": "GPU-1", "cores": 101})
