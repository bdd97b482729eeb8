"""`tessera convert`: the same conversion as the webhook, printed for files."""

from pathlib import Path
from typing import Any

import pytest
import yaml

from kubelet_plugin.command import main

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples"


def run(capsys: pytest.CaptureFixture[str], *args: str) -> tuple[int, str, str]:
    code = main(["convert", *args])
    out, err = capsys.readouterr()
    return code, out, err


@pytest.mark.parametrize(
    ("name", "capacity"),
    [
        ("hami-default-use.yaml", {"memory": "3000Mi", "cores": "30"}),
        ("hami-deployment.yaml", {"memory": "4000Mi", "cores": "25"}),
        ("volcano-vgpu.yaml", {"memory": "1024Mi"}),
    ],
)
def test_prints_templates_first_with_the_capacities_asked(
    capsys: pytest.CaptureFixture[str], name: str, capacity: dict[str, str]
) -> None:
    code, out, _ = run(capsys, str(EXAMPLES / name))
    docs: list[Any] = list(yaml.safe_load_all(out))
    assert code == 0 and docs[0]["kind"] == "ResourceClaimTemplate" and len(docs) == 2
    assert docs[0]["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"] == capacity


def test_every_example_converts(capsys: pytest.CaptureFixture[str]) -> None:
    files = sorted(str(p) for p in EXAMPLES.glob("*.yaml"))
    code, out, _ = run(capsys, "--summary", *files)
    assert code == 0 and out.count("from template tessera-") == len(files)
    assert "2 whole GPUs on distinct GPUs [gpu.tessera.dev]" in out


def test_slices_give_the_catalog(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    slices = {
        "apiVersion": "v1",
        "kind": "List",
        "items": [
            {
                "kind": "ResourceSlice",
                "spec": {
                    "driver": "gpu.tessera.dev",
                    "devices": [
                        {
                            "name": "gpu-0-vgpu",
                            "attributes": {
                                "gpu.tessera.dev/type": {"string": "vgpu"},
                                "gpu.tessera.dev/productName": {"string": "NVIDIA L4"},
                            },
                            "capacity": {"memory": {"value": "23034Mi"}},
                        }
                    ],
                },
            }
        ],
    }
    (tmp_path / "slices.yaml").write_text(yaml.safe_dump(slices))
    code, out, _ = run(
        capsys, "--slices", str(tmp_path / "slices.yaml"), str(EXAMPLES / "hami-memory-fraction.yaml")
    )
    request = next(yaml.safe_load_all(out))["spec"]["spec"]["devices"]["requests"][0]
    assert code == 0 and request["exactly"]["capacity"]["requests"]["memory"] == "11517Mi"


def test_bad_input_exits_2_naming_file_object_and_field(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    pod = yaml.safe_load((EXAMPLES / "hami-default-use.yaml").read_text())
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = 900000
    (tmp_path / "pod.yaml").write_text(yaml.safe_dump(pod))
    code, _, err = run(capsys, str(tmp_path / "pod.yaml"))
    assert code == 2
    assert "pod.yaml: Pod/gpu-pod: spec.containers[0].resources.limits[nvidia.com/gpumem]: 900000 MiB" in err


NODES = Path(__file__).resolve().parents[3] / "e2e" / "nodes"


def test_explain_takes_a_pod_and_explains_each_containers_claim(capsys: pytest.CaptureFixture[str]) -> None:
    node = str(NODES / "h100x8.yaml")
    code = main(["explain", str(EXAMPLES / "hami-default-use.yaml"), "--simulate", node])
    out = capsys.readouterr().out
    assert code == 0
    assert out.startswith("== Pod/gpu-pod container ubuntu-container: 2 vgpu slices on distinct GPUs")
    assert "can be allocated" in out


def test_explain_says_when_a_pod_cannot_fit(capsys: pytest.CaptureFixture[str]) -> None:
    code = main(["explain", str(EXAMPLES / "hami-card-type.yaml"), "--simulate", str(NODES / "h100x8.yaml")])
    assert code == 1 and "cannot be allocated" in capsys.readouterr().out
