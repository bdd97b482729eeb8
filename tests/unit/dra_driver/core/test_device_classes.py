"""The DeviceClasses in deviceclasses/ and the chart's list of families are what the family registry says."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml

from dra_driver.core import families
from dra_driver.core.device_classes import CHART_FILE, chart_families, chart_schema, main, manifests
from dra_driver.core.families.base import NodeSetting
from dra_driver.core.families.gpu import WholeGpu
from dra_driver.core.families.mig import Mig, mig_device_class_name
from dra_driver.vocabulary.names import Family, device_class_name

ROOT = Path(__file__).resolve().parents[4]
CLASSES = ROOT / "deviceclasses"
CHART = ROOT / "deploy" / "helm" / "tessera"


def test_the_shipped_classes_are_generated() -> None:
    shipped = {
        p.name
        for p in CLASSES.glob("*.yaml")
        if any(d and d.get("kind") == "DeviceClass" for d in yaml.safe_load_all(p.read_text()))
    }
    generated = manifests()
    assert shipped == set(generated), "run deploy/render-manifests.sh"
    for name, text in generated.items():
        assert (CLASSES / name).read_text() == text, f"{name}: run deploy/render-manifests.sh"


def test_the_chart_ranges_over_the_generated_families() -> None:
    assert (CHART / "files" / CHART_FILE).read_text() == chart_families(), "run deploy/render-manifests.sh"
    listed = yaml.safe_load(chart_families())["families"]
    assert [f["name"] for f in listed] == list(families.names())


def test_the_values_schema_checks_the_family_settings_as_declared() -> None:
    shipped = json.loads((CHART / "values.schema.json").read_text())
    assert chart_schema(shipped) == shipped, "run deploy/render-manifests.sh"
    group = shipped["properties"]["nodeGroups"]["items"]["properties"]
    assert group["vgpuShares"]["maximum"] == 64 and group["migProfiles"]["minItems"] == 1


class Dial(WholeGpu):
    name = Family("dial")
    class_meaning = "a test family with a node setting."
    settings = (
        NodeSetting(
            key="dialTurns", default=1, meaning="turns", decode=lambda raw: raw, schema={"type": "integer"}
        ),
    )


def test_a_family_setting_enters_the_schema_and_leaves_it_with_its_family() -> None:
    shipped = json.loads((CHART / "values.schema.json").read_text())
    added = chart_schema(shipped, [*families.FAMILIES, Dial()])
    group = added["properties"]["nodeGroups"]["items"]["properties"]
    assert group["dialTurns"] == {"description": "turns", "type": "integer"}
    assert yaml.safe_load(chart_families([Dial()]))["families"] == [
        {"name": "dial", "settings": ["dialTurns"]}
    ]
    gone = chart_schema(added)  # the family's module is removed again
    assert "dialTurns" not in gone["properties"]["nodeGroups"]["items"]["properties"] and gone == shipped


def test_the_chart_offers_a_class_for_every_profile_by_default() -> None:
    defaults = yaml.safe_load((CHART / "values.yaml").read_text())["deviceClasses"]
    for f in yaml.safe_load(chart_families())["families"]:
        if "profiles" in f:
            family = families.family(f["name"])
            assert sorted(defaults[f["profiles"]]) == sorted(family.class_profiles()), f["profiles"]


def test_every_family_has_its_class_and_mig_one_per_profile() -> None:
    docs = [d for text in manifests().values() for d in yaml.safe_load_all(text) if d]
    names = {d["metadata"]["name"] for d in docs}
    assert {device_class_name(n) for n in families.names()} <= names
    mig = families.family("mig")
    assert {mig_device_class_name(p) for p in mig.class_profiles()} <= names
    me = next(d for d in docs if d["metadata"]["name"] == "mig-1g.10gb-me.gpu.tessera.dev")
    assert me["metadata"]["labels"]["gpu.tessera.dev/mig-profile"] == "1g.10gb-me"
    assert me["spec"]["extendedResourceName"] == "gpu.tessera.dev/mig-1g.10gb-me"
    assert me["spec"]["selectors"][0]["cel"]["expression"] == (
        'device.driver == "gpu.tessera.dev" && device.attributes["gpu.tessera.dev"].type == "mig" && '
        'device.attributes["gpu.tessera.dev"].profile == "1g.10gb+me"'
    )


class Widget(WholeGpu):
    name = Family("widget")
    class_meaning = "a test family's device."


class Slab(Mig):
    name = Family("slab")
    class_meaning = "a test family with profiles."


def test_a_new_family_gets_its_classes_without_touching_the_generator() -> None:
    files = manifests([Widget(), Slab()])
    assert set(files) == {"widget.yaml", "slab.yaml", "slab-profiles.yaml"}
    (widget,) = yaml.safe_load_all(files["widget.yaml"])
    assert widget["metadata"]["name"] == "widget.tessera.dev"
    assert widget["spec"]["extendedResourceName"] == "gpu.tessera.dev/widget"
    assert files["widget.yaml"].splitlines()[2] == "# Tessera DeviceClass: a test family's device."
    profiles = [d for d in yaml.safe_load_all(files["slab-profiles.yaml"]) if d]
    assert len(profiles) == len(Slab().class_profiles())
    assert profiles[0]["metadata"]["name"] == "slab-1g.5gb.gpu.tessera.dev"
    assert yaml.safe_load(chart_families([Widget(), Slab()]))["families"] == [
        {"name": "widget"},
        {"name": "slab", "profiles": "slabProfiles", "settings": ["migProfiles"]},
    ]


def test_every_line_stays_readable() -> None:
    for text in [*manifests().values(), chart_families()]:
        assert max(len(line) for line in text.splitlines()) <= 110


def test_the_command_prints_each_file(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["list"]) == 0
    assert capsys.readouterr().out.split() == list(manifests())
    assert main(["manifest", "gpu.yaml"]) == 0
    assert capsys.readouterr().out == manifests()["gpu.yaml"]
    assert main(["manifest", "nope.yaml"]) == 2 and main([]) == 2
