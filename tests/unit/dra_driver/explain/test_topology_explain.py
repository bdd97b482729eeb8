"""`tessera explain` on GPUs and another driver's NICs under one `matchAttribute` (docs/topology.md): it finds
the one PCIe switch with two NICs and says why the NICs elsewhere were passed over."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.explain.cli import main
from dra_driver.explain.command import EXIT_DOES_NOT_FIT, EXIT_FITS
from dra_driver.vocabulary.names import NUMA_NODE_ATTRIBUTE
from tests.support.doubles.nic_driver import HGX_NICS, Nic, aligned_claim, nic_class, nic_slice

REPO = Path(__file__).resolve().parents[4]
H100X8 = REPO / "e2e" / "nodes" / "h100x8.yaml"
NODE = "sim-h100x8"
NICS = HGX_NICS


def explain(tmp_path: Path, capsys: pytest.CaptureFixture[str], *, nics: int) -> tuple[int, dict[str, Any]]:
    classes = tmp_path / "classes"
    classes.mkdir()
    for f in (REPO / "deviceclasses").glob("*.yaml"):
        (classes / f.name).write_text(f.read_text())
    (classes / "nic.yaml").write_text(yaml.safe_dump(nic_class()))
    (tmp_path / "nics.yaml").write_text(yaml.safe_dump(nic_slice(NODE, NICS)))
    (tmp_path / "claim.yaml").write_text(
        yaml.safe_dump(aligned_claim("aligned", "default", gpus=2, nics=nics))
    )
    code = main(
        [
            "explain",
            str(tmp_path / "claim.yaml"),
            "--simulate",
            str(H100X8),
            "--simulate",
            str(tmp_path / "nics.yaml"),
            "--classes",
            str(classes),
            "--output",
            "json",
        ]
    )
    return code, json.loads(capsys.readouterr().out)


def test_two_gpus_and_two_nics_under_one_pcie_root(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    code, verdict = explain(tmp_path, capsys, nics=2)
    assert code == EXIT_FITS
    gpus, nics = verdict["requests"]
    assert sorted(gpus["allocated"]) == [f"{NODE}/gpu-4", f"{NODE}/gpu-5"]
    assert sorted(nics["allocated"]) == [f"{NODE}/nic-2", f"{NODE}/nic-3"]
    passed_over = {
        d["device"]: d["message"] for d in nics["devices"] if not d["fits"] and d["reason"] == "constraint"
    }
    assert set(passed_over) == {f"{NODE}/nic-0", f"{NODE}/nic-1", f"{NODE}/nic-4"}
    assert (
        "matchAttribute resource.kubernetes.io/pcieRoot: pci0000:15 differs from pci0000:55"
        in (passed_over[f"{NODE}/nic-0"])
    )


def test_three_nics_under_one_root_exist_nowhere(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    code, verdict = explain(tmp_path, capsys, nics=3)
    assert code == EXIT_DOES_NOT_FIT
    assert verdict["satisfiable"] is False


def test_list_valued_numa_nodes_match_where_they_intersect(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """numaNode's list form (DRAListTypeAttributes): a NIC listing both nodes matches a GPU on either."""
    nics = nic_slice(NODE, (Nic("nic-far", "pci0000:96", 1), Nic("nic-near", "pci0000:97", 1)))
    nics["spec"]["devices"][0]["attributes"][NUMA_NODE_ATTRIBUTE] = {"ints": [1]}
    nics["spec"]["devices"][1]["attributes"][NUMA_NODE_ATTRIBUTE] = {"ints": [1, 0]}
    claim = aligned_claim("numa", "default", gpus=1, nics=1, attribute=NUMA_NODE_ATTRIBUTE)
    (tmp_path / "nics.yaml").write_text(yaml.safe_dump(nics))
    (tmp_path / "claim.yaml").write_text(yaml.safe_dump(claim))
    (tmp_path / "nic-class.yaml").write_text(yaml.safe_dump(nic_class()))
    args = ["explain", str(tmp_path / "claim.yaml"), "--simulate", str(H100X8)]
    args += ["--simulate", str(tmp_path / "nics.yaml"), "--output", "json"]
    classes = tmp_path / "classes"
    classes.mkdir()
    for f in [*(REPO / "deviceclasses").glob("*.yaml"), tmp_path / "nic-class.yaml"]:
        (classes / f.name).write_text(f.read_text())
    assert main([*args, "--classes", str(classes)]) == EXIT_FITS
    gpus, nics_request = json.loads(capsys.readouterr().out)["requests"]
    assert gpus["allocated"] == [f"{NODE}/gpu-3"]  # NUMA node 0 (the topology-aware order)
    assert nics_request["allocated"] == [f"{NODE}/nic-near"]
    why = {d["device"]: d["message"] for d in nics_request["devices"] if d.get("reason") == "constraint"}
    assert why == {f"{NODE}/nic-far": f"matchAttribute {NUMA_NODE_ATTRIBUTE}: [1] differs from 0 of gpu-3"}
