"""The MPS family on a node, in this process: claims prepared through the family seam start their GPU's MPS
control daemon (the fake nvidia-cuda-mps-control), give each container its client variables, survive a
restart of the node daemon, and are settled at start-up; a client run with a prepared claim's edits (the fake
libcuda's tmps) is a client of that daemon and holds to its limits."""

from __future__ import annotations

import json
import os
import shutil
import signal
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from prepare_env import Env, claim, result

from dra_driver.families.mps import PINNED_MEMORY_ENV, PIPE_DIRECTORY_ENV, THREAD_PERCENTAGE_ENV
from dra_driver.names import GpuUUID, cdi_spec_file_name
from e2e.fake_mps import stop_mps_daemons
from e2e.interceptor_programs import FAKE_GPU0, FAKE_GPU1, MPS_CONTROL, TMPS, env
from kubelet_plugin.mps_control import MpsControl
from kubelet_plugin.reconcile import reconcile

pytestmark = pytest.mark.skipif(not MPS_CONTROL.exists(), reason="run `make dev` to build the fake MPS tool")
GiB = 1 << 30
# the fake libcuda's two GPUs, so that the clients a test runs see the GPUs the plugin planned for
NODE_YAML = f"""apiVersion: sim.tessera.dev/v1
kind: SimulatedNode
nodeName: node-a
gpus:
- product: H100-80GB-SXM
  uuid: {FAKE_GPU0}
- product: H100-80GB-SXM
  uuid: {FAKE_GPU1}
"""


@pytest.fixture
def node() -> Iterator[Env]:
    # short: the MPS control socket's path must fit a unix socket address (108 bytes)
    root = Path(tempfile.mkdtemp(prefix="tmf-", dir="/tmp"))
    e = Env.create(root, node_yaml=NODE_YAML)
    try:
        yield e
    finally:
        stop_mps_daemons(e.paths.mps_dir)
        shutil.rmtree(root, ignore_errors=True)


def mps(gpu: int, *, memory: str, cores: str, request: str = "gpu") -> dict[str, Any]:
    return result(
        f"gpu-{gpu}-mps",
        request=request,
        shareID=os.urandom(4).hex(),
        consumedCapacity={"memory": memory, "cores": cores},
    )


def daemons(e: Env) -> dict[GpuUUID, int | None]:
    return {s.gpu_uuid: s.pid for s in MpsControl(root=e.paths.mps_dir, tool=str(MPS_CONTROL)).running()}


def claim_env(e: Env, uid: str) -> dict[str, str]:
    """The claim's MPS client variables as a process on the host sees them (mounts mapped back)."""
    spec = json.loads((e.paths.cdi_dir / cdi_spec_file_name(uid)).read_text())  # type: ignore[arg-type]
    edits = spec["containerEdits"]
    mounts = {m["containerPath"]: m["hostPath"] for m in edits.get("mounts", [])}
    out = dict(kv.split("=", 1) for kv in edits["env"])
    out[PIPE_DIRECTORY_ENV] = mounts[out[PIPE_DIRECTORY_ENV]]
    return {k: v for k, v in out.items() if k.startswith("CUDA_MPS_")}


def test_two_claims_one_daemon_per_gpu_their_variables_and_its_life(node: Env) -> None:
    a, b = node.put(
        claim("a", mps(0, memory="20Gi", cores="30")),
        claim("b", mps(0, memory="40Gi", cores="70")),
    )
    preparer = node.preparer()
    answers = preparer.prepare([a, b])
    assert all(r.error is None for r in answers.values()), answers
    assert list(daemons(node)) == [FAKE_GPU0]
    ea, eb = claim_env(node, a.uid), claim_env(node, b.uid)
    assert (ea[THREAD_PERCENTAGE_ENV], ea[PINNED_MEMORY_ENV]) == ("30", "0=20480M")
    assert (eb[THREAD_PERCENTAGE_ENV], eb[PINNED_MEMORY_ENV]) == ("70", "0=40960M")
    assert ea[PIPE_DIRECTORY_ENV] == eb[PIPE_DIRECTORY_ENV]

    # a process with claim a's variables is a client of GPU 0's daemon, sees that GPU as device 0, and stops
    # at the pinned limit
    run_env = env(None, node.root / "gpu-state", **ea)
    done = subprocess.run(
        [str(TMPS), "view", "1", FAKE_GPU0], env=run_env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr
    done = subprocess.run(
        [str(TMPS), "pinned", str(20 * GiB)], env=run_env, capture_output=True, text=True, check=False
    )
    assert done.returncode == 0, done.stdout + done.stderr

    assert preparer.unprepare([a])[a.uid].error is None
    assert list(daemons(node)) == [FAKE_GPU0]  # b still uses it
    assert preparer.unprepare([b])[b.uid].error is None
    assert daemons(node) == {}  # stopped after the last, its directories gone


def test_the_daemon_outlives_a_restart_and_is_settled_at_start_up(node: Env) -> None:
    (a,) = node.put(claim("a", mps(1, memory="1Gi", cores="50")))
    assert node.preparer().prepare([a])[a.uid].error is None
    (pid,) = daemons(node).values()

    report = reconcile(node.preparer(boot_id="boot-1"))  # a restarted node daemon: the claim still lives
    assert report.kept_claims == (a.uid,) and daemons(node) == {FAKE_GPU1: pid}

    assert pid is not None
    os.kill(pid, signal.SIGKILL)  # the daemon died: the claim is rolled forward and the daemon started again
    report = reconcile(node.preparer(boot_id="boot-1"))
    assert report.rolled_forward == (a.uid,), report.problems
    (again,) = daemons(node).values()
    assert again not in (None, pid)

    node.claims.delete(namespace="ns", name="a")  # the claim went while the node daemon was down
    report = reconcile(node.preparer(boot_id="boot-1"))
    assert report.released_claims == (a.uid,) and daemons(node) == {}
    assert report.removed_other == (f"mps-daemon {FAKE_GPU1}",)


def test_a_claim_holds_one_mps_device(node: Env) -> None:
    (c,) = node.put(
        claim(
            "two",
            mps(0, memory="1Gi", cores="10", request="x"),
            mps(1, memory="1Gi", cores="10", request="y"),
        )
    )
    error = node.preparer().prepare([c])[c.uid].error
    assert error is not None and "a claim may hold one MPS device" in error
    assert daemons(node) == {}
