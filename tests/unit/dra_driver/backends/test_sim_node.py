from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from dra_driver.backends.sim_node import decode_node, load_node
from dra_driver.values.errors import ConfigError


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
