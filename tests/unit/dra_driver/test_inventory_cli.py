from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes.client import V1ResourceSlice

from dra_driver.cli import main

NODES = Path(__file__).resolve().parents[3] / "e2e" / "nodes"


def test_summary_shows_every_family_per_gpu(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["inventory", "--simulate", str(NODES / "h100x8.yaml")]) == 0
    out = capsys.readouterr().out
    for i in range(8):
        assert f"gpu-{i}: gpu 1, vgpu 1, mps 1, mig 25" in out
        assert f"gpu-{i}-counters: 8 counters" in out
    assert "5 slices, 224 devices" in out


def test_yaml_and_json_are_resource_slices(capsys: pytest.CaptureFixture[str]) -> None:
    assert (
        main(
            ["inventory", "--simulate", str(NODES / "mixed-a100-l4.yaml"), "-o", "yaml", "--node-name", "n1"]
        )
        == 0
    )
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert [d["spec"]["pool"]["name"] for d in docs] == ["n1", "n1"]
    assert all(V1ResourceSlice.from_dict(d) is not None for d in docs)
    assert main(["inventory", "--simulate", str(NODES / "a100-mig-on.yaml"), "-o", "json"]) == 0
    listed = json.loads(capsys.readouterr().out)
    assert listed["kind"] == "List" and listed["items"][0]["spec"]["nodeName"] == "sim-a100-mig-on"


def test_settings_file_and_degraded_mode(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nfamilies: {mig: false}\n")
    assert main(["inventory", "--simulate", str(NODES / "h100x8.yaml"), "--settings", str(settings)]) == 0
    assert "gpu-0: gpu 1, vgpu 1, mps 1, mig 0" in capsys.readouterr().out
    assert main(["inventory", "--simulate", str(NODES / "h100x8.yaml"), "--degraded"]) == 0
    assert "1 slices, 8 devices" in capsys.readouterr().out


def test_errors_are_reported_with_exit_code_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = tmp_path / "node.yaml"
    bad.write_text(
        "apiVersion: sim.tessera.dev/v1\nkind: SimulatedNode\ngpus: [{product: L4, colour: red}]\n"
    )
    assert main(["inventory", "--simulate", str(bad)]) == 2
    assert "unknown field 'colour'" in capsys.readouterr().err
