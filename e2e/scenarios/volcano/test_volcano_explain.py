"""`tessera explain` where Volcano placed the pods: it reads the claim vc-scheduler allocated (its own
allocation left out, the claim fits where it is), counts that allocation against any other claim (a whole GPU
asked for the GPU Volcano gave away is "in use by" the Volcano pod's claim), and explains a pod file written
for Volcano's vGPU device plugin, `schedulerName: volcano` and all."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from dra_driver.vocabulary.names import Attr
from e2e.harness.kube import Json
from e2e.harness.testbed import SimCluster
from e2e.scenarios.probes import H100, apply, attribute, results
from e2e.scenarios.volcano.test_volcano_placement import placed_by_volcano
from e2e.volcano.workloads import claim_template, pod_with_template, volcano_pod

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families, pytest.mark.timeout(240)]

ROOT = Path(__file__).resolve().parents[3]
TESSERA = Path(sys.executable).parent / "tessera"


def explain(bed: SimCluster, *args: str) -> tuple[int, str]:
    done = subprocess.run(
        [str(TESSERA), "explain", *args, f"--node={H100}", f"--kubeconfig={bed.plane.kubeconfig}"],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    return done.returncode, done.stdout + done.stderr


def test_explain_reads_what_volcano_allocated(vbed: SimCluster, vns: str, tmp_path: Path) -> None:
    apply(
        vbed,
        vns,
        [claim_template("whole", "gpu.tessera.dev"), volcano_pod(pod_with_template("w", "whole"), name="w")],
    )
    pod = placed_by_volcano(vbed, vns, "w")
    (r,) = results(vbed, vns, pod, "gpu")
    (status,) = pod["status"]["resourceClaimStatuses"]
    claim = f"{vns}/{status['resourceClaimName']}"

    code, out = explain(vbed, claim, "--output=json")
    assert code == 0, out
    verdict: Json = json.loads(out)
    (request,) = verdict["requests"]
    fitting = {d["device"] for d in request["devices"] if d["fits"]}
    device = f"{H100}/{r['device']}"
    assert device in fitting, "the claim fits where Volcano put it (its own allocation left out)"

    uuid = attribute(vbed, H100, r["device"], Attr.UUID)
    same_gpu = claim_template(
        "same-gpu", "gpu.tessera.dev", cel=f'device.attributes["gpu.tessera.dev"].uuid == "{uuid}"'
    )
    path = tmp_path / "same-gpu.yaml"
    path.write_text(yaml.safe_dump(same_gpu))
    code, out = explain(vbed, str(path), "--verbose")
    assert code == 1, out
    assert f"no        {device}: [already-allocated] in use by claim {claim}" in out, out

    code, out = explain(vbed, str(ROOT / "admission" / "examples" / "volcano-vgpu.yaml"))
    assert code == 0, out
    assert "== Pod/test1 container pod1-ctr" in out and "can be allocated" in out, out
