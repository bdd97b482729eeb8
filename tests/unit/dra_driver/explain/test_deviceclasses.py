"""Each shipped DeviceClass selects exactly the intended devices of the simulated nodes' real slices."""

from pathlib import Path
from typing import Any

import pytest

from dra_driver.core import families
from dra_driver.core.families import mig, vgpu
from dra_driver.core.families.mig import mig_device_class_name
from dra_driver.core.profiles import PRODUCTS
from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.core.slices import build_slices
from dra_driver.explain.catalog import CatalogDevice, build_catalog
from dra_driver.explain.cel_env import Outcome, compile_selector, device_variable
from dra_driver.explain.request import DeviceClassSpec, parse_device_class
from dra_driver.explain.simulation import slices_for_simulated_node
from dra_driver.explain.sources import REPO_DEVICECLASSES, load_files
from dra_driver.vocabulary.names import Cap, device_class_name, qualified
from tests.support.inventories import make_gpu, make_inventory

NODE_FILES = sorted((Path(__file__).resolve().parents[4] / "e2e" / "nodes").glob("*.yaml"))
CLASSES = {c.name: c for c in map(parse_device_class, load_files([REPO_DEVICECLASSES]).classes)}
ALL_PROFILES = sorted({p.name for prod in PRODUCTS for p in prod.mig_profiles})
# One class per family, named after it (every family needs its DeviceClass in deviceclasses/).
FAMILY_CLASS = {name: device_class_name(name) for name in families.names()}
OVERSUBSCRIBED = "vgpu-oversubscribed.tessera.dev"
VIRTUAL = qualified(Cap.VIRTUAL_MEMORY)


def selected(cls: DeviceClassSpec, devices: tuple[CatalogDevice, ...], variables: list[object]) -> set[str]:
    chosen = set()
    for d, var in zip(devices, variables, strict=True):
        outcomes = [compile_selector(s).evaluate(var) for s in cls.selectors]
        assert all(o.outcome is not Outcome.ERROR for o in outcomes), (cls.name, d.name, outcomes)
        if all(o.outcome is Outcome.MATCH for o in outcomes):
            chosen.add(d.name)
    return chosen


def intended(class_name: str, devices: tuple[CatalogDevice, ...]) -> set[str]:
    out = set()
    for d in devices:
        parsed = families.parse_device_name(d.name)
        if class_name == FAMILY_CLASS[parsed.family.name]:
            out.add(d.name)
        profile = str(d.attributes.get("gpu.tessera.dev/profile", ""))
        if parsed.family is mig.FAMILY and class_name == mig_device_class_name(profile):
            out.add(d.name)
        # vgpu-oversubscribed: the vgpu devices of nodes that publish host-backed memory
        if parsed.family is vgpu.FAMILY and class_name == OVERSUBSCRIBED and VIRTUAL in d.capacity:
            out.add(d.name)
    return out


def test_there_is_a_class_per_family_and_per_mig_profile() -> None:
    wanted = set(FAMILY_CLASS.values()) | {mig_device_class_name(p) for p in ALL_PROFILES}
    assert wanted <= set(CLASSES), sorted(wanted - set(CLASSES))


def oversubscribed_node() -> list[dict[str, Any]]:
    inv = make_inventory(make_gpu(0, "H100-80GB-SXM"), make_gpu(1, "A100-SXM4-40GB"))
    return build_slices(inv, NodeSettings(node_name="n", family=family_settings(memoryOversubscription=2)))


@pytest.mark.parametrize("node_file", [*NODE_FILES, None], ids=lambda p: p.stem if p else "oversubscribed")
def test_each_class_selects_exactly_its_devices(node_file: Path | None) -> None:
    if node_file is None:
        catalog = build_catalog(oversubscribed_node())
        # the opt-in class finds the vgpu devices of a node that publishes host-backed memory, and only those
        oversubscribed = {d.name for d in catalog.devices if VIRTUAL in d.capacity}
        assert oversubscribed == {"gpu-0-vgpu", "gpu-1-vgpu"}
    else:
        (node,) = load_files([node_file]).nodes
        catalog = build_catalog(slices_for_simulated_node(node))
    assert catalog.devices, "the simulated node publishes devices"
    covered: set[str] = set()
    variables = [
        device_variable(
            driver=d.key.driver,
            attributes=d.attributes,
            capacity={k: c.value for k, c in d.capacity.items()},
            allow_multiple_allocations=d.allow_multiple_allocations,
        )
        for d in catalog.devices
    ]
    for name, cls in CLASSES.items():
        got = selected(cls, catalog.devices, variables)
        assert got == intended(name, catalog.devices), name
        if not name.startswith("mig-"):
            covered |= got
    # Every published device is reachable through exactly one family class.
    assert covered == {d.name for d in catalog.devices}


def test_classes_do_not_touch_other_drivers_devices() -> None:
    other = device_variable(
        driver="gpu.example.com", attributes={"type": "gpu"}, capacity={}, allow_multiple_allocations=False
    )
    for cls in CLASSES.values():
        for s in cls.selectors:
            assert compile_selector(s).evaluate(other).outcome is Outcome.NO_MATCH


def test_the_first_families_keep_their_class_names() -> None:
    assert {"gpu": "gpu.tessera.dev", "vgpu": "vgpu.tessera.dev", "mig": "mig.tessera.dev"}.items() <= (
        FAMILY_CLASS.items()
    )
