from __future__ import annotations

import pytest

from dra_driver.core.allocation import LibrarySettings, plan_claim
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, vgpu
from dra_driver.libtessera.limits_file import LibraryLimits
from dra_driver.vocabulary.errors import ClaimError, ConfigError, PlacementTakenError
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import DRIVER_NAME
from tests.support.claim_models import POOL, claim, config, result, vgpu_result
from tests.support.inventories import make_gpu, make_inventory

GiB = 1 << 30

H100 = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "H100-80GB-SXM"))


def plan(c: object, inventory: Inventory = H100, **kw: object):  # type: ignore[no-untyped-def]
    return plan_claim(c, driver=DRIVER_NAME, pool=POOL, inventory=inventory, **kw)  # type: ignore[arg-type]


def error_of(c: object, inventory: Inventory = H100, **kw: object) -> str:
    with pytest.raises((ClaimError, ConfigError, PlacementTakenError)) as info:
        plan(c, inventory, **kw)
    return str(info.value)


def test_whole_gpu() -> None:
    c = claim(result("gpu-1"))
    p = plan(c)
    assert p.uid == c.metadata.uid and (p.namespace, p.name, p.pool) == ("ns", "claim", POOL)
    (d,) = p.devices
    assert (d.family, d.gpu_index, d.gpu_uuid, d.spec) == (whole.NAME, 1, H100.gpus[1].uuid, None)
    assert p.library is None and p.limits() == ()


def test_results_of_other_drivers_are_ignored() -> None:
    p = plan(claim(result("nic-0", driver="net.example.com", pool="elsewhere"), result("gpu-0")))
    assert [d.device for d in p.devices] == ["gpu-0"]


def test_errors_about_the_allocation() -> None:
    assert "no allocation results for driver gpu.tessera.dev" in error_of(
        claim(result("nic-0", driver="net.example.com"))
    )
    assert "allocated from pool 'node-b', but this node's pool is 'node-a'" in error_of(
        claim(result("gpu-0"), result("gpu-1", pool="node-b"))
    )
    assert "claim is not allocated" in error_of(claim(result("gpu-0"), allocated=False))
    assert "this node has no GPU with index 7" in error_of(claim(result("gpu-7")))
    assert "device name 'gpu-zero' is not of the form gpu-<index>" in error_of(claim(result("gpu-zero")))
    assert "'gpu-0-bogus' is not a Tessera device" in error_of(claim(result("gpu-0-bogus")))


def test_bad_opaque_config_fails_the_claim_even_if_unused() -> None:
    c = claim(result("gpu-0"), configs=[config("VgpuConfig", requests=["other"], prioity=0)])
    assert "opaque.parameters.prioity: unknown field in VgpuConfig" in error_of(c)


def test_other_drivers_configs_are_not_decoded() -> None:
    plan(claim(result("gpu-0"), configs=[config("Whatever", driver="net.example.com", x=1)]))


def test_mixed_claim_keeps_result_order() -> None:
    c = claim(vgpu_result(0, request="v"), result("gpu-1-mig-1g10gb-3", request="m"))
    p = plan(c)
    assert [(d.request, d.family) for d in p.devices] == [("v", vgpu.NAME), ("m", mig.NAME)]
    assert p.library == LibrarySettings(policy="default", log_level=1)
    assert [lim.gpu_index for lim in p.limits()] == [0]


def test_each_devices_library_limits_are_asked_of_its_family_once(monkeypatch: pytest.MonkeyPatch) -> None:
    asked: list[str] = []
    library = vgpu.Vgpu.library

    def counted(self: vgpu.Vgpu, d: vgpu.Planned) -> LibraryLimits:
        asked.append(d.device)
        return library(self, d)

    monkeypatch.setattr(vgpu.Vgpu, "library", counted)
    p = plan(claim(vgpu_result(1, request="a", cores="30"), vgpu_result(0, request="b", cores="20")))
    assert sorted(asked) == ["gpu-0-vgpu", "gpu-1-vgpu"]
    # the claim-wide settings and every reader after planning take them from the plan
    assert [(lim.gpu_index, lim.cores) for lim in p.limits()] == [(0, 20), (1, 30)]
    assert [d.library_limits for d in p.devices] == [p.limits()[1], p.limits()[0]]
    assert p.library == LibrarySettings(policy="default", log_level=1)
    assert sorted(asked) == ["gpu-0-vgpu", "gpu-1-vgpu"]


def test_claim_wide_library_settings_must_agree() -> None:
    c = claim(
        vgpu_result(0, request="a"),
        vgpu_result(1, request="b"),
        configs=[
            config("VgpuConfig", requests=["a"], logLevel=3),
            config("VgpuConfig", requests=["b"], logLevel=2),
        ],
    )
    # the vgpu family's own rule speaks first: its devices share one config
    assert "VgpuConfig for request b differs from request a" in error_of(c)
