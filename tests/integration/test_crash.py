"""SIGKILL the daemon at every step of prepare and unprepare; a restarted daemon and a retried call converge.

Every case runs on both backends: simulated, and NVML over the fake libnvidia-ml. Each claim has a vgpu
device and a MIG device, so every step (MIG mode, MIG instance, claim directory, CDI spec, checkpoint)
happens in one call. After convergence and a final unprepare nothing is left: no CDI spec or temp file, no
claim directory, no checkpoint entry, no MIG instance, MIG mode back off.
"""

from __future__ import annotations

import signal
import uuid
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_driver.vocabulary.names import DRIVER_NAME
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.record.steps import Step
from tests.support.faults import Faults
from tests.support.kubelet_client import DraClient
from tests.support.plugin_process import NODE, PluginProcess, cleanup, node_state
from tests.support.sample_claims import claim_ref

pytestmark = pytest.mark.timeout(60)

BACKENDS = ("simulated", "nvml")
PREPARE_POINTS = [s for s in Step if not s.value.startswith("unprepare-")]
UNPREPARE_POINTS = [s for s in Step if s.value.startswith("unprepare-")]


def mixed_claim(name: str) -> dict[str, Any]:
    """One claim, two requests: a vgpu share of GPU 0 and a MIG instance on GPU 1."""
    results = [
        {
            "request": "shared",
            "driver": DRIVER_NAME,
            "pool": NODE,
            "device": "gpu-0-vgpu",
            "shareID": str(uuid.uuid4()),
            "consumedCapacity": {"memory": "8Gi", "cores": "25"},
        },
        {"request": "mig", "driver": DRIVER_NAME, "pool": NODE, "device": "gpu-1-mig-3g40gb-4"},
    ]
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": "crash", "uid": str(uuid.uuid4())},
        "spec": {
            "devices": {
                "requests": [
                    {"name": "shared", "exactly": {"deviceClassName": "vgpu.tessera.dev"}},
                    {"name": "mig", "exactly": {"deviceClassName": "mig.tessera.dev"}},
                ]
            }
        },
        "status": {"allocation": {"devices": {"results": results}}},
    }


def assert_clean(p: PluginProcess) -> None:
    cdi, dirs, entries, mig, modes = node_state(p)
    assert (cdi, dirs, entries, mig) == ([], [], [], [])
    assert not any(modes), "Tessera switched MIG mode on and must switch it off after its last instance"


def assert_prepared(p: PluginProcess, ref: ClaimRef) -> None:
    cdi, dirs, entries, mig, _ = node_state(p)
    assert [n for n in cdi if ref.uid in n] == [p.paths.cdi_spec_file(ref.uid).name]
    assert dirs == [ref.uid]
    assert entries == [ref.uid]
    assert mig == [(1, 4)]


def call_and_die(p: PluginProcess, call: str, ref: ClaimRef) -> None:
    with DraClient(p.paths.dra_socket) as client:
        with pytest.raises(grpc.RpcError) as info:
            getattr(client, call)([ref], timeout=20)
        assert info.value.code() in (grpc.StatusCode.UNAVAILABLE, grpc.StatusCode.UNKNOWN)
    assert p.wait_exit() == -signal.SIGKILL


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("point", PREPARE_POINTS, ids=lambda p: p.value)
def test_kill_during_prepare(root: Path, point: Step, backend: str) -> None:
    p = PluginProcess(root=root, nvml=backend == "nvml")
    claim = mixed_claim("crash")
    p.claims.put(claim)
    ref = claim_ref(claim)
    try:
        p.start(extra_env=Faults(kill_at=frozenset({point})).env())
        call_and_die(p, "prepare", ref)
        p.start()  # the restarted daemon reconciles, then the kubelet retries
        with DraClient(p.paths.dra_socket) as client:
            answer = client.prepare([ref]).claims[ref.uid]
            assert answer.error == ""
            assert sorted(d.device_name for d in answer.devices) == ["gpu-0-vgpu", "gpu-1-mig-3g40gb-4"]
            assert_prepared(p, ref)
            assert client.unprepare([ref]).claims[ref.uid].error == ""
        assert_clean(p)
        assert p.terminate() == 0
    finally:
        cleanup([p], root)


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("point", UNPREPARE_POINTS, ids=lambda p: p.value)
def test_kill_during_unprepare(root: Path, point: Step, backend: str) -> None:
    p = PluginProcess(root=root, nvml=backend == "nvml")
    claim = mixed_claim("crash")
    p.claims.put(claim)
    ref = claim_ref(claim)
    try:
        p.start(extra_env=Faults(kill_at=frozenset({point})).env())
        with DraClient(p.paths.dra_socket) as client:
            assert client.prepare([ref]).claims[ref.uid].error == ""
        assert_prepared(p, ref)
        call_and_die(p, "unprepare", ref)
        p.start()
        with DraClient(p.paths.dra_socket) as client:
            assert client.unprepare([ref]).claims[ref.uid].error == ""
        assert_clean(p)
        assert p.terminate() == 0
    finally:
        cleanup([p], root)


def test_every_kill_point_is_covered() -> None:
    assert set(PREPARE_POINTS) | set(UNPREPARE_POINTS) == set(Step)
    assert Step.AFTER_MIG_CREATE in PREPARE_POINTS
    assert Step.UNPREPARE_AFTER_MIG_DESTROY in UNPREPARE_POINTS
