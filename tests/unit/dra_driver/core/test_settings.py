from __future__ import annotations

import pytest

from dra_driver.core import families
from dra_driver.core.device_order import DeviceOrder
from dra_driver.core.families import gpu as whole
from dra_driver.core.families import mig, mps
from dra_driver.core.families.capacity import SHARES
from dra_driver.core.settings import NodeSettings, family_settings
from dra_driver.vocabulary.errors import ConfigError

HEADER = {"apiVersion": "resource.tessera.dev/v1", "kind": "NodeSettings"}


def test_defaults_offer_everything() -> None:
    s = NodeSettings(node_name="node-a")
    assert s.families == frozenset(families.names()) and s.setting(SHARES) == 10
    assert s.setting(mig.PROFILES) is None
    assert s.device_order is DeviceOrder.FRAGMENTATION_AWARE


def test_from_mapping_reads_profiles_and_order() -> None:
    s = NodeSettings.from_mapping(
        {**HEADER, "migProfiles": ["1g.10gb", "3g.40gb", "7g.80gb"], "deviceOrder": "by-gpu"}, node_name="n"
    )
    assert s.setting(mig.PROFILES) == frozenset({"1g.10gb", "3g.40gb", "7g.80gb"})
    assert s.device_order is DeviceOrder.BY_GPU


def test_from_mapping_switches_families_off() -> None:
    s = NodeSettings.from_mapping({**HEADER, "families": {"vgpu": False}, "vgpuShares": 4}, node_name="n1")
    assert s.families == {whole.NAME, mps.NAME, mig.NAME} and s.setting(SHARES) == 4 and s.node_name == "n1"
    s2 = NodeSettings.from_mapping({**HEADER, "nodeName": "from-file"})
    assert s2.node_name == "from-file"


@pytest.mark.parametrize(
    ("data", "message"),
    [
        ({**HEADER, "colour": 1}, "colour: unknown NodeSettings field"),
        ({**HEADER, "families": {"tpu": True}}, "families.tpu: unknown family"),
        ({**HEADER, "families": {"mig": "no"}}, "families.mig: expected true or false"),
        ({**HEADER, "vgpuShares": 0}, "vgpuShares: 0 is out of range"),
        ({**HEADER, "sharesPerGpu": 0}, "sharesPerGpu: 0 is out of range"),
        ({**HEADER, "sharesPerGpu": "4"}, "sharesPerGpu: expected an integer"),
        ({**HEADER, "vgpuShares": "10"}, "vgpuShares: expected an integer"),
        ({**HEADER, "vgpuShares": True}, "vgpuShares: expected an integer"),
        ({**HEADER, "vgpuShares": 65}, r"vgpuShares: 65 is out of range; use 1\.\.64 \(a GPU.s view holds"),
        ({"apiVersion": "v1", "kind": "NodeSettings"}, "apiVersion/kind"),
        ({**HEADER}, "nodeName: not set"),
        ({**HEADER, "migProfiles": "1g.10gb"}, "migProfiles: expected a list"),
        ({**HEADER, "migProfiles": None}, None),  # null: every profile, as when absent
        ({**HEADER, "migProfiles": []}, "migProfiles: empty; .* families.mig: false"),
        ({**HEADER, "migProfiles": ["1g.10gb", 7]}, r"migProfiles\[1\]: expected a profile name"),
        ({**HEADER, "migProfiles": ["1g10gb"]}, r"migProfiles\[0\]: MIG profile '1g10gb' is not of the form"),
        ({**HEADER, "migProfiles": ["1g.10gb", "1g.10gb"]}, r"migProfiles\[1\]: 1g.10gb is listed twice"),
        ({**HEADER, "deviceOrder": "best"}, "deviceOrder: 'best' is not one of fragmentation-aware, by-gpu"),
    ],
)
def test_bad_settings_name_the_field(data: dict[str, object], message: str | None) -> None:
    if message is None:
        assert NodeSettings.from_mapping(data, node_name="n").setting(mig.PROFILES) is None
        return
    with pytest.raises(ConfigError, match=message):
        NodeSettings.from_mapping(data, node_name=None if message.startswith("nodeName") else "n")


def test_node_name_must_be_a_dns_subdomain() -> None:
    with pytest.raises(ConfigError, match="nodeName: 'Node_A'"):
        NodeSettings(node_name="Node_A")


def test_values_are_checked_when_made_in_code_too() -> None:
    with pytest.raises(ConfigError, match="migProfiles: empty"):
        NodeSettings(node_name="n", family=family_settings(migProfiles=[]))
    with pytest.raises(ConfigError, match="deviceOrder"):
        NodeSettings(node_name="n", device_order="by-gpu")  # type: ignore[arg-type]


def test_the_families_declare_their_own_fields() -> None:
    """A family's setting is read by its NodeSetting, and a key no family declares is refused by name."""
    declared = families.node_settings()
    assert declared["sharesPerGpu"] is SHARES and declared["migProfiles"] is mig.PROFILES
    assert declared["vgpuShares"] is SHARES  # its former name
    assert {k for f in families.FAMILIES for s in f.settings for k in s.keys} == set(declared)
    with pytest.raises(ConfigError, match="mpsShares: no family declares this node setting"):
        family_settings(mpsShares=3)


def test_shares_per_gpu_is_read_under_its_former_name_too() -> None:
    """`vgpuShares` caps MPS as well, so the setting is `sharesPerGpu`; a file of before still reads the same,
    and one giving both names must give one value (the error names both fields)."""
    for data in ({"sharesPerGpu": 4}, {"vgpuShares": 4}, {"sharesPerGpu": 4, "vgpuShares": 4}):
        assert NodeSettings.from_mapping({**HEADER, **data}, node_name="n").setting(SHARES) == 4
    assert family_settings(vgpuShares=4) == family_settings(sharesPerGpu=4)
    with pytest.raises(ConfigError, match=r"sharesPerGpu, vgpuShares: two names of one setting .* \(4, 10\)"):
        NodeSettings.from_mapping({**HEADER, "sharesPerGpu": 4, "vgpuShares": 10}, node_name="n")
    with pytest.raises(ConfigError, match=r"vgpuShares, sharesPerGpu: .*give sharesPerGpu only"):
        family_settings(vgpuShares=10, sharesPerGpu=4)


def test_scheduler_version_names_the_release_of_another_schedulers_allocator() -> None:
    assert NodeSettings.from_mapping(HEADER, node_name="n").scheduler_version is None
    s = NodeSettings.from_mapping({**HEADER, "schedulerVersion": "v1.36.1"}, node_name="n")
    assert s.scheduler_version == "v1.36.1"
    wrong = r"^schedulerVersion: .* is not a Kubernetes release like v1\.36\.1"
    for bad in ("volcano", "1", 1.36, ["v1.36.1"]):
        with pytest.raises(ConfigError, match=wrong):
            NodeSettings.from_mapping({**HEADER, "schedulerVersion": bad}, node_name="n")
