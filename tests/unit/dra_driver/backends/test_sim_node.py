from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.backends.sim_node import SimulatedNode, decode_node, load_node
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.vocabulary.errors import ConfigError


def decode(text: str) -> object:
    return decode_node(
        yaml.safe_load("apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\n" + text), default_name="x"
    )


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("gpus: [{product: L4, colour: red}]", r"gpus\[0\]: unknown field 'colour'"),
        ("gpus: [{product: L4, count: '2'}]", r"gpus\[0\].count: expected int"),
        ("gpus: [{product: L4, count: 0}]", r"gpus\[0\].count: must be at least 1"),
        ("gpus: [{product: L4, migEnabled: true}]", r"gpus\[0\].migEnabled: L4 cannot do MIG"),
        ("gpus: [{product: Voodoo2}]", r"gpus\[0\].product: unknown GPU product"),
        ("gpus: [{product: L4, count: 2, uuid: GPU-1}]", r"gpus\[0\].uuid: only allowed with count 1"),
        ("gpus: []", "at least one GPU"),
        ("gpus: [{count: 1}]", r"gpus\[0\]: missing required field 'product'"),
        ("gpuz: []", "unknown field 'gpuz'"),
        ("hostMemoryGiB: 0\ngpus: [{product: L4}]", r"hostMemoryGiB: expected 1..1048576 \(GiB\), got 0"),
        ("hostMemoryGiB: 1.5\ngpus: [{product: L4}]", "hostMemoryGiB: expected int"),
        (
            "gpus: [{product: H100-80GB-SXM, instances: [{profile: 1g.10gb, start: 0}]}]",
            "need migEnabled: true",
        ),
        (
            "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: [{profile: 3g.40gb, start: 2}]}]",
            r"instances\[0\].start: 2 is not a placement of 3g.40gb",
        ),
        (
            "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: [{profile: 9g.1tb, start: 0}]}]",
            r"instances\[0\].profile: '9g.1tb' is not a MIG profile",
        ),
        (
            "gpus: [{product: H100-80GB-SXM, migEnabled: true, instances: "
            "[{profile: 3g.40gb, start: 0}, {profile: 1g.10gb, start: 3}]}]",
            "overlaps",
        ),
    ],
)
def test_bad_node_files_name_the_field(body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        decode(body)


def test_header_is_checked() -> None:
    with pytest.raises(ConfigError, match="kind: expected 'SimulatedNode'"):
        decode_node({"apiVersion": "sim.tessera.dev/v1", "kind": "Node", "gpus": []}, default_name="x")


def test_profile_by_id_and_explicit_uuid() -> None:
    node = decode(
        "nodeName: n\ngpus:\n- {product: A100-SXM4-40GB, uuid: GPU-abc, migEnabled: true,\n"
        "   instances: [{profile: 0, start: 0}]}\n"
    )
    assert node.gpus[0].uuid == "GPU-abc"  # type: ignore[attr-defined]
    assert node.gpus[0].admin_instances[0].profile_id == 0  # type: ignore[attr-defined]


def test_load_node_reports_path_and_yaml_errors(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("gpus: [\n")
    with pytest.raises(ConfigError, match="not valid YAML"):
        load_node(bad)
    with pytest.raises(ConfigError, match="cannot read"):
        load_node(tmp_path / "missing.yaml")


def test_topology_of_each_entry_and_its_bridged_pairs() -> None:
    node = decode(
        "gpus:\n"
        "- {product: H100-80GB-PCIE, count: 2, numaNode: 0, pcieRoot: pci0000:16, nvlink: bridge}\n"
        "- {product: H100-80GB-SXM, count: 2, numaNode: 1, pcieRoot: pci0000:55, nvlink: switch,\n"
        "   fabric: {clusterUuid: 2b6d5c3a-0f1e-4d2c-9b8a-7766554433aa, cliqueId: 3}}\n"
        "- {product: L4}\n"
    )
    gpus = node.gpus  # type: ignore[attr-defined]
    assert [(g.pcie_root, g.numa_node) for g in gpus] == [("pci0000:16", 0)] * 2 + [("pci0000:55", 1)] * 2 + [
        (None, None)
    ]
    assert [g.nvlinks.peers for g in gpus] == [(1,), (0,), (), (), ()]
    assert [g.nvlinks.switch for g in gpus] == [False, False, True, True, False]
    assert [g.fabric.clique_id if g.fabric else None for g in gpus] == [None, None, 3, 3, None]


@pytest.mark.parametrize(
    ("body", "message"),
    [
        ("gpus: [{product: L4, pcieRoot: pci15}]", r"gpus\[0\].pcieRoot: 'pci15' is not a PCIe root complex"),
        ("gpus: [{product: L4, pcieRoot: 15}]", r"gpus\[0\].pcieRoot: expected str"),
        ("gpus: [{product: L4, numaNode: -1}]", r"gpus\[0\].numaNode: expected 0..1023"),
        ("gpus: [{product: L4, nvlink: nvswitch}]", r"'nvswitch' is not one of switch, bridge"),
        ("gpus: [{product: L4, nvlink: bridge}]", "give it count 2 or more"),
        ("gpus: [{product: L4, fabric: {clusterUuid: x, cliqueId: 1}, nvlink: switch}]", "'x' is not a UUID"),
        (
            "gpus: [{product: L4, fabric: {clusterUuid: 2b6d5c3a-0f1e-4d2c-9b8a-7766554433aa, cliqueId: 1}}]",
            "a GPU fabric needs nvlink: switch",
        ),
    ],
)
def test_bad_topology_is_refused(body: str, message: str) -> None:
    with pytest.raises(ConfigError, match=message):
        decode(body)


def test_the_host_memory_is_the_node_files_or_a_dgx_h100s_and_the_inventory_says_it() -> None:
    for text, gib in (("gpus: [{product: L4}]", 2048), ("hostMemoryGiB: 64\ngpus: [{product: L4}]", 64)):
        node = decode(text)
        assert isinstance(node, SimulatedNode)
        backend = SimulatedBackend(node=node, state_file=None)
        try:
            assert backend.inventory().host_memory_bytes == gib << 30
        finally:
            backend.close()
