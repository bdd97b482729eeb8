"""`tessera convert`: the same conversion as the webhook, printed for files."""

import resource
import subprocess
import sys
from collections.abc import Callable
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


@pytest.mark.parametrize(
    ("flags", "expected"),
    [
        ((), "volcano"),  # offline: the pod names Volcano, so the cluster runs it; vc-scheduler places it
        (("--volcano=remove",), None),
        (("--replace-scheduler=volcano",), None),
        (("--keep-scheduler", "--replace-scheduler=volcano"), "volcano"),
    ],
)
def test_schedulername_volcano_is_kept_unless_asked(
    capsys: pytest.CaptureFixture[str], flags: tuple[str, ...], expected: str | None
) -> None:
    code, out, _ = run(capsys, str(EXAMPLES / "volcano-vgpu.yaml"), *flags)
    (pod,) = [d for d in yaml.safe_load_all(out) if d["kind"] == "Pod"]
    assert code == 0 and pod["spec"].get("schedulerName") == expected
    assert pod["spec"]["containers"][0]["resources"]["claims"], "converted either way"


def test_convert_refuses_auto_it_has_no_cluster_to_ask(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as e:
        main(["convert", str(EXAMPLES / "volcano-vgpu.yaml"), "--volcano=auto"])
    assert e.value.code == 2 and "invalid choice: 'auto'" in capsys.readouterr().err


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


# ---- hostile YAML: refused in one line, exit 2, fast (issue #34) -------------------------------------------


def alias_bomb() -> str:
    """A HAMi pod carrying the "billion laughs": 10^9 strings once its aliases are written out."""
    lines = ["apiVersion: v1", "kind: Pod", "metadata: {name: lol}", "spec:", "  containers:"]
    lines += ["  - {name: c, image: x, resources: {limits: {nvidia.com/gpu: 1}}}"]
    lines += ['  lol0: &l0 ["lol","lol","lol","lol","lol","lol","lol","lol","lol"]']
    lines += [f"  lol{i}: &l{i} [{','.join([f'*l{i - 1}'] * 9)}]" for i in range(1, 9)]
    return "\n".join(lines) + "\n"


def children_cpu_s() -> float:
    used = resource.getrusage(resource.RUSAGE_CHILDREN)
    return used.ru_utime + used.ru_stime


def tessera(*args: str) -> tuple[int, str, float]:
    """Exit code, stderr, and the CPU seconds the command used: what expanding a bomb would cost, which a
    loaded machine does not inflate the way it stretches wall time."""
    before = children_cpu_s()
    done = subprocess.run(
        [sys.executable, "-m", "kubelet_plugin.command", *args],
        capture_output=True,
        text=True,
        timeout=60,
        check=False,
    )
    return done.returncode, done.stderr, children_cpu_s() - before


@pytest.fixture(scope="module")
def start_up(tmp_path_factory: pytest.TempPathFactory) -> Callable[[list[str]], float]:
    """What starting Python, importing Tessera and reading an empty file costs here (CPU seconds), per
    command: the baseline of the one second."""
    empty = tmp_path_factory.mktemp("baseline") / "empty.yaml"
    empty.write_text("")
    seen: dict[str, float] = {}

    def baseline(command: list[str]) -> float:
        key = " ".join(command)
        if key not in seen:
            seen[key] = min(tessera(*command, *with_files(command, empty))[2] for _ in range(2))
        return seen[key]

    return baseline


def with_files(command: list[str], path: Path) -> list[str]:
    return [str(path), str(EXAMPLES / "hami-default-use.yaml")] if command[-1] == "--slices" else [str(path)]


@pytest.mark.parametrize(
    ("content", "limit"),
    [
        (alias_bomb(), "its aliases expand to more than 100000 nodes beyond those written (the limit)"),
        ("[" * 100_000, "nested deeper than 100 levels (line 1, column 101) (the limit)"),
    ],
    ids=["alias bomb", "deep nesting"],
)
@pytest.mark.parametrize(
    "command", [["convert"], ["convert", "-o", "json"], ["convert", "--slices"], ["explain"]], ids=" ".join
)
def test_hostile_yaml_exits_2_in_one_line_within_a_second(
    tmp_path: Path, start_up: Callable[[list[str]], float], content: str, limit: str, command: list[str]
) -> None:
    evil = tmp_path / "evil.yaml"
    evil.write_text(content)
    code, err, took = tessera(*command, *with_files(command, evil))
    assert code == 2 and err.count("\n") == 1 and "Traceback" not in err
    assert err.startswith(f"tessera {command[0]}: {evil}: ") and limit in err and err.count(str(evil)) == 1
    assert took < start_up(command) + 1.0


def test_nvidia_dra_claims_print_as_tessera_claims(capsys: pytest.CaptureFixture[str]) -> None:
    """Issue #36: claims written for NVIDIA's DRA driver (whole GPU, MIG, time-slicing, MPS) come out on
    Tessera's DeviceClasses, Pods that name them unchanged, nothing of NVIDIA's left in a claim."""
    files = sorted(str(p) for p in (EXAMPLES / "nvidia").glob("*.yaml"))
    assert len(files) == 4
    code, out, err = run(capsys, *files)
    assert code == 0, err
    docs: list[Any] = list(yaml.safe_load_all(out))
    claims = {
        d["metadata"]["name"]: d for d in docs if d["kind"] in ("ResourceClaim", "ResourceClaimTemplate")
    }
    classes = {
        name: [
            r["exactly"]["deviceClassName"]
            for r in (c["spec"].get("spec") or c["spec"])["devices"]["requests"]
        ]
        for name, c in claims.items()
    }
    assert classes == {
        "big-gpu": ["gpu.tessera.dev"],
        "two-migs": ["mig.tessera.dev", "mig.tessera.dev"],
        "shared-gpu": ["gpu.tessera.dev"],
        "mps-share": ["mps.tessera.dev"],
    }
    assert "nvidia.com'" not in yaml.safe_dump_all(list(claims.values()))  # no NVIDIA attribute is read
    pods = [d for d in docs if d["kind"] == "Pod"]
    originals = [d for f in files for d in yaml.safe_load_all(Path(f).read_text()) if d["kind"] == "Pod"]
    assert pods == originals

    code, out, _ = run(capsys, "--summary", *files)
    assert "request mps: MPS share (memory 8Gi, cores 30; mps.tessera.dev)" in out
    assert "request small: MIG device on Tessera (mig.tessera.dev)" in out


def test_an_nvidia_compute_domain_claim_exits_2_naming_why(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": "imex"},
        "spec": {
            "spec": {
                "devices": {
                    "requests": [
                        {
                            "name": "ch",
                            "exactly": {"deviceClassName": "compute-domain-default-channel.nvidia.com"},
                        }
                    ]
                }
            }
        },
    }
    path = tmp_path / "imex.yaml"
    path.write_text(yaml.safe_dump(claim))
    code, out, err = run(capsys, str(path))
    assert code == 2 and not out
    assert "ResourceClaimTemplate/imex" in err and "ComputeDomain IMEX channels have no counterpart" in err


HAMI_CONFIG_MAPS = """\
apiVersion: v1
kind: ConfigMap
metadata: {name: hami-scheduler-device, namespace: kube-system}
data:
  device-config.yaml: |
    nvidia:
      deviceMemoryScaling: 2
      deviceSplitCount: 10
---
apiVersion: v1
kind: ConfigMap
metadata: {name: hami-device-plugin, namespace: kube-system}
data:
  config.json: |
    {"nodeconfig": [{"name": "gpu-node-1", "devicememoryscaling": 1.5}]}
  broken.yaml: "nvidia: [unclosed"
"""


def test_hamis_memory_scaling_in_its_config_maps_is_named_as_the_node_group_setting(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    """docs/migration-from-hami.md: the ConfigMaps pass through unchanged; what to set instead is said beside
    the output (stderr), or in the summary's notes."""
    path = tmp_path / "hami.yaml"
    path.write_text(HAMI_CONFIG_MAPS)
    code, out, err = run(capsys, str(path))
    assert code == 0 and list(yaml.safe_load_all(out)) == list(yaml.safe_load_all(HAMI_CONFIG_MAPS))
    lines = err.splitlines()
    assert len(lines) == 2
    assert lines[0].startswith(
        f"tessera convert: {path}: ConfigMap/hami-scheduler-device: device-config.yaml: "
        "nvidia.deviceMemoryScaling 2 is nodeGroups[].memoryOversubscription: 2 for every group;"
    )
    assert lines[1].startswith(
        f"tessera convert: {path}: ConfigMap/hami-device-plugin: config.json: "
        "nodeconfig[0].devicememoryscaling 1.5 is nodeGroups[].memoryOversubscription: 1.5 for the group of "
        "node gpu-node-1;"
    )
    code, out, err = run(capsys, "--summary", str(path))
    assert code == 0 and not err
    assert out.count("  note: ") == 2 and "no HAMi or Volcano GPU request" not in out
