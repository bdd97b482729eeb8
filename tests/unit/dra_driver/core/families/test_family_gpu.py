from __future__ import annotations

from dra_driver.core.families import gpu as whole
from dra_driver.core.families.protocol import LibraryLimited
from tests.support.claim_models import claim, result
from tests.support.family_plans import error_of, plan
from tests.support.inventories import make_gpu, make_inventory


def test_a_whole_gpu_plans_to_itself() -> None:
    (d,) = plan(claim(result("gpu-1"))).devices
    assert (d.family, d.gpu_index, d.spec) == (whole.NAME, 1, None)
    assert not isinstance(whole.FAMILY, LibraryLimited) and whole.FAMILY.status(d, None) == {}


def test_not_on_a_gpu_in_mig_mode() -> None:
    inv = make_inventory(make_gpu(0, "A100-SXM4-80GB", mig_enabled=True))
    assert "GPU 0 is in MIG mode, so it cannot be used as a whole GPU" in error_of(
        claim(result("gpu-0")), inv
    )


def test_names() -> None:
    assert whole.FAMILY.parse_name("") == () and whole.FAMILY.parse_name("vgpu") is None
    gpu = make_gpu(3, "H100-80GB-SXM")
    assert whole.FAMILY.possible_devices(gpu) == ("gpu-3",)
