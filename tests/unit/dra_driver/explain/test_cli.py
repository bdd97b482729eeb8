import argparse
import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from dra_driver.explain.cli import add_cli, main
from dra_driver.explain.command import EXIT_CANNOT_DECIDE, EXIT_DOES_NOT_FIT, EXIT_FITS, EXIT_USAGE
from tests.support.slicegen import allocated_claim, claim, exactly, node_slices

NODE_FILE = Path(__file__).resolve().parents[4] / "e2e" / "nodes" / "mixed-a100-l4.yaml"


def write(path: Path, *docs: dict[str, Any]) -> Path:
    path.write_text(yaml.safe_dump_all(docs))
    return path


def test_fits_on_simulated_slices_exit_0(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev")))
    node = write(tmp_path / "node.yaml", *node_slices(1))
    assert main(["explain", str(c), "--simulate", str(node)]) == EXIT_FITS
    assert "can be allocated" in capsys.readouterr().out


def test_allocated_claims_in_the_node_file_make_it_not_fit_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev")))
    node = write(tmp_path / "node.yaml", *node_slices(1), allocated_claim("busy", ("gpu-0", {})))
    assert main(["explain", str(c), "--simulate", str(node), "--output", "json"]) == EXIT_DOES_NOT_FIT
    out = json.loads(capsys.readouterr().out)
    device = next(d for d in out["requests"][0]["devices"] if d["device"] == "node-a/gpu-0")
    assert device["reason"] == "already-allocated" and "default/busy" in device["message"]


def test_simulated_node_file_goes_through_the_slice_builder(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    c = write(tmp_path / "c.yaml", claim(exactly("m", "mig.tessera.dev")))
    code = main(["explain", str(c), "--simulate", str(NODE_FILE)])
    out = capsys.readouterr().out
    assert code in (EXIT_FITS, EXIT_DOES_NOT_FIT)
    assert "request m" in out and "sim-" in out


@pytest.mark.parametrize(
    "args",
    [
        ["explain", "missing.yaml", "--simulate", "nope.yaml"],
        ["explain", "default/name", "--simulate", "{node}"],
        ["explain", "{bad}", "--simulate", "{node}"],
    ],
)
def test_bad_input_exit_2(args: list[str], tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = write(tmp_path / "node.yaml", *node_slices(1))
    bad = tmp_path / "bad.yaml"
    bad.write_text("kind: ResourceClaim\nspec: {devices: {requests: [{name: x, exactly: {count: 1}}]}}\n")
    argv = [a.format(node=node, bad=bad) for a in args]
    assert main(argv) == EXIT_USAGE
    assert "tessera explain:" in capsys.readouterr().err


def test_add_cli_registers_explain_on_a_foreign_parser() -> None:
    parser = argparse.ArgumentParser(prog="tessera")
    add_cli(parser.add_subparsers(dest="command"))
    args = parser.parse_args(["explain", "ns/c", "--node", "n1", "--kubeconfig", "/k"])
    assert args.node == "n1" and callable(args.handler)


MIXED_NODE = {
    "apiVersion": "sim.tessera.dev/v1",
    "kind": "SimulatedNode",
    "nodeName": "sim-mix",
    "driverVersion": "550.54.15",
    "cudaDriverVersion": "12.4",
    "gpus": [
        {"product": "A100-SXM4-40GB", "count": 2, "migEnabled": False},
        {"product": "H100-80GB-SXM", "count": 2, "migEnabled": False},
    ],
}
PRODUCT = 'device.attributes["gpu.tessera.dev"].productName'


def fitting(out: dict[str, Any]) -> set[str]:
    return {d["device"] for d in out["requests"][0]["devices"] if d["fits"]}


def test_cel_bind_selects_exactly_the_h100s(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = write(tmp_path / "node.yaml", MIXED_NODE)
    bound = f'cel.bind(p, {PRODUCT}, p.startsWith("NVIDIA H100"))'
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev", selectors=(bound,))))
    assert main(["explain", str(c), "--simulate", str(node), "--output", "json"]) == EXIT_FITS
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "fits" and not out["errors"] and not out["undecided"]
    assert fitting(out) == {"sim-mix/gpu-2", "sim-mix/gpu-3"}  # the A100s are gpu-0 and gpu-1

    plain = write(
        tmp_path / "p.yaml",
        claim(exactly("g", "gpu.tessera.dev", selectors=(f'{PRODUCT}.startsWith("NVIDIA H100")',))),
    )
    assert main(["explain", str(plain), "--simulate", str(node), "--output", "json"]) == EXIT_FITS
    assert fitting(json.loads(capsys.readouterr().out)) == fitting(out)


def test_optional_types_cannot_decide_exit_2(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    node = write(tmp_path / "node.yaml", MIXED_NODE)
    optional = 'device.attributes["gpu.tessera.dev"].?productName.orValue("").startsWith("NVIDIA H100")'
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev", selectors=(optional,))))
    assert main(["explain", str(c), "--simulate", str(node), "--output", "json"]) == EXIT_CANNOT_DECIDE
    captured = capsys.readouterr()
    out = json.loads(captured.out)
    assert out["verdict"] == "cannot-decide" and not out["errors"]
    assert "optional types" in out["undecided"][0] and "request g selector #0" in out["undecided"][0]
    err = captured.err.strip().splitlines()
    assert len(err) == 1 and "cannot decide" in err[0] and "kube-scheduler accepts" in err[0]
    assert "rejected" not in captured.out + captured.err

    assert main(["explain", str(c), "--simulate", str(node)]) == EXIT_CANNOT_DECIDE
    text = capsys.readouterr().out
    assert "cannot decide" in text.splitlines()[0] and "selector-unsupported" in text


def test_a_real_syntax_error_is_still_rejected_exit_1(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = write(tmp_path / "node.yaml", MIXED_NODE)
    broken = f'cel.bind(p, {PRODUCT}, p.startsWith("NVIDIA H100")'  # missing `)`
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev", selectors=(broken,))))
    assert main(["explain", str(c), "--simulate", str(node), "--output", "json"]) == EXIT_DOES_NOT_FIT
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "does-not-fit" and not out["undecided"]
    assert "CEL rejected by the API server: syntax error" in out["errors"][0]


def test_rejected_selector_outweighs_an_undecided_one(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    node = write(tmp_path / "node.yaml", MIXED_NODE)
    selectors = (f"{PRODUCT}.?x.hasValue()", "devices.driver == 'x'")
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev", selectors=selectors)))
    assert main(["explain", str(c), "--simulate", str(node), "--output", "json"]) == EXIT_DOES_NOT_FIT
    out = json.loads(capsys.readouterr().out)
    assert out["verdict"] == "does-not-fit" and "undeclared reference to 'devices'" in out["errors"][0]


ONE_H100 = {
    "apiVersion": "sim.tessera.dev/v1",
    "kind": "SimulatedNode",
    "nodeName": "sim-one",
    "gpus": [{"product": "H100-80GB-SXM", "count": 1}],
}
SHARE = ("gpu-0-vgpu", {"memory": "1Gi", "cores": "0", "shares": "1"})


def test_a_simulated_node_is_explained_with_the_settings_given(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The node's group lets two claims share a GPU (`vgpuShares: 2`): a third share on a GPU whose two are
    taken is refused, as that node's published slices would refuse it; with the default settings (10 shares)
    it fits. Before, the node's slices were built with default settings whatever its group said."""
    two_taken = (allocated_claim("a", SHARE, node="sim-one"), allocated_claim("b", SHARE, node="sim-one"))
    node = write(tmp_path / "node.yaml", ONE_H100, *two_taken)
    settings = tmp_path / "settings.yaml"
    settings.write_text("apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nvgpuShares: 2\n")
    share = exactly("v", "vgpu.tessera.dev", capacity={"requests": {"memory": "1Gi", "cores": "0"}})
    c = write(tmp_path / "c.yaml", claim(share))

    argv = ["explain", str(c), "--simulate", str(node), "--output", "json"]
    assert main([*argv, "--settings", str(settings)]) == EXIT_DOES_NOT_FIT
    refused = next(d for d in json.loads(capsys.readouterr().out)["requests"][0]["devices"])
    assert refused["device"] == "sim-one/gpu-0-vgpu" and refused["reason"] == "shares-exhausted"
    assert "0 of 2 left" in refused["message"]

    assert main(argv) == EXIT_FITS
    assert fitting(json.loads(capsys.readouterr().out)) == {"sim-one/gpu-0-vgpu"}


def test_settings_for_no_simulated_node_are_refused(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    settings = tmp_path / "settings.yaml"
    settings.write_text("apiVersion: resource.tessera.dev/v1\nkind: NodeSettings\nvgpuShares: 2\n")
    c = write(tmp_path / "c.yaml", claim(exactly("g", "gpu.tessera.dev")))
    node = write(tmp_path / "node.yaml", *node_slices(1))
    assert main(["explain", str(c), "--simulate", str(node), "--settings", str(settings)]) == EXIT_USAGE
    assert "--settings" in capsys.readouterr().err
