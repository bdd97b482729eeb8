"""`tessera sim inject`: faults on a simulated GPU through the state file, seen by another backend instance
(as a running daemon sees them), kept across MIG changes, cleared on recovery."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from dra_driver.backends.sim_state import decode_state, encode_state, read_state
from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.cli import main
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.inventory import FaultKind, GpuFault

NODE = """apiVersion: sim.tessera.dev/v1
kind: SimulatedNode
nodeName: node-a
gpus:
- product: H100-80GB-SXM
  count: 3
"""


@pytest.fixture
def files(tmp_path: Path) -> tuple[Path, Path]:
    node = tmp_path / "node.yaml"
    node.write_text(NODE)
    return node, tmp_path / "state.json"


def inject(files: tuple[Path, Path], *args: str) -> int:
    node, state = files
    return main(["sim", "inject", "--node-file", str(node), "--state-file", str(state), *args])


def test_a_fault_reaches_a_running_backend_and_clears(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    node, state = files
    daemon = SimulatedBackend.from_file(node_file=node, state_file=state)
    assert inject(files, "--gpu", "2", "--xid", "79", "--detail", "PCIe link down") == 0
    assert "XID 79 (GPU has fallen off the bus): PCIe link down injected" in capsys.readouterr().out
    gpus = daemon.inventory().gpus
    assert gpus[2].faults == (GpuFault(FaultKind.LOST, xid=79, detail="PCIe link down"),)
    assert gpus[0].faults == gpus[1].faults == ()
    # a MIG change on that GPU keeps the fault
    daemon.set_mig_mode(gpu=gpus[2].uuid, enabled=True)
    assert daemon.inventory().gpus[2].faults != ()
    assert inject(files, "--gpu", "2", "--ecc-dbe") == 0
    assert [f.kind for f in daemon.inventory().gpus[2].faults] == [FaultKind.LOST, FaultKind.ECC_DBE]
    assert inject(files, "--gpu", "2", "--clear") == 0
    assert "2 fault(s) cleared" in capsys.readouterr().out
    assert daemon.inventory().gpus[2].faults == ()
    assert daemon.inventory().gpus[2].mig_enabled


def test_bad_requests_are_refused_naming_the_option(
    files: tuple[Path, Path], capsys: pytest.CaptureFixture[str]
) -> None:
    assert inject(files, "--gpu", "7", "--lost") == 2
    assert "--gpu 7" in capsys.readouterr().err
    assert inject(files, "--gpu", "0", "--xid", "13") == 2
    assert "--xid 13: an application's XID" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        inject(files, "--gpu", "0")  # nothing to inject


def test_faults_round_trip_in_the_state_file_and_bad_ones_are_refused(files: tuple[Path, Path]) -> None:
    node, state = files
    backend = SimulatedBackend.from_file(node_file=node, state_file=state)
    uuid = backend.gpu_by_index(1).uuid
    backend.inject_fault(gpu=uuid, fault=GpuFault(FaultKind.NVML_ERROR, detail="x"))
    saved = read_state(state)
    assert saved is not None and decode_state(encode_state(saved)) == saved
    raw = json.loads(state.read_text())
    raw["gpus"][uuid]["faults"] = [{"kind": "melted"}]
    with pytest.raises(ConfigError, match=r"faults\[0\]\.kind: 'melted' is not one of"):
        decode_state(raw)
