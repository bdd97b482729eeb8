"""The real daemon as a subprocess, driven over its unix sockets exactly as the kubelet drives it."""

from __future__ import annotations

import fcntl
import os
import shutil
import signal
import tempfile
import time
import uuid
from pathlib import Path

import grpc
import pytest

from dra_driver.core.families import mig as mig_family
from dra_driver.core.families import mps
from dra_driver.vocabulary.names import cdi_device_name, cdi_qualified_name
from kubelet_plugin.host_parts.mps.control import MpsControl
from kubelet_plugin.proto.gen import health_v1_pb2
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL, stop_mps_daemons
from tests.support.kubelet_client import DraClient, register
from tests.support.plugin_process import NODE, PluginProcess, cleanup, node_backend
from tests.support.sample_claims import allocated_claim, claim_ref, vgpu_claim

pytestmark = pytest.mark.timeout(120)


def checkpoint_uids(p: PluginProcess) -> set[str]:
    store = CheckpointStore(path=p.paths.checkpoint_file)
    if not store.path.exists():
        return set()
    return set(store.load(boot_id="unused").claims)


def mig_instances(p: PluginProcess) -> list[tuple[str, int, int]]:
    with node_backend(p) as backend:
        return [
            (str(g.uuid), m.profile_id, m.start) for g in backend.inventory().gpus for m in g.mig_instances
        ]


def test_registration_handshake_via_the_tessera_cli(root: Path) -> None:
    plugin = PluginProcess(root=root, via_cli=True).start()
    try:
        got = register(plugin.paths.registration_socket)
    finally:
        plugin.kill()
    assert got.info.type == "DRAPlugin"
    assert got.info.name == "gpu.tessera.dev"
    assert got.info.endpoint == str(plugin.paths.dra_socket)
    assert "v1.DRAPlugin" in got.info.supported_versions
    assert "registered with the kubelet" in plugin.log()


def test_vgpu_prepare_unprepare_is_idempotent(plugin: PluginProcess) -> None:
    plugin.register()
    claim = vgpu_claim("half", pool=NODE, gpu=3, memory="20Gi", cores="50")
    plugin.claims.put(claim)
    ref = claim_ref(claim)
    share = claim["status"]["allocation"]["devices"]["results"][0]["shareID"]
    with DraClient(plugin.paths.dra_socket) as client:
        first = client.prepare([ref])
        entry = first.claims[ref.uid]
        assert entry.error == ""
        [device] = entry.devices
        assert (device.pool_name, device.device_name, device.share_id) == (NODE, "gpu-3-vgpu", share)
        assert list(device.cdi_device_ids) == [
            cdi_qualified_name(cdi_device_name(ref.uid, "gpu-3-vgpu", share))
        ]
        assert plugin.paths.cdi_spec_file(ref.uid).exists()
        limits = (plugin.paths.claim_dir(ref.uid) / "limits").read_text()
        assert f"memory {20 * 2**30} cores 50" in limits
        assert checkpoint_uids(plugin) == {ref.uid}

        again = client.prepare([ref])
        assert again.claims[ref.uid] == entry  # same answer, nothing redone

        assert client.unprepare([ref]).claims[ref.uid].error == ""
        assert not plugin.paths.cdi_spec_file(ref.uid).exists()
        assert not plugin.paths.claim_dir(ref.uid).exists()
        assert checkpoint_uids(plugin) == set()
        assert client.unprepare([ref]).claims[ref.uid].error == ""


def test_v1beta1_and_mig(plugin: PluginProcess) -> None:
    claim = allocated_claim("mig", device="gpu-1-mig-1g10gb-2", family=mig_family.NAME, pool=NODE)
    plugin.claims.put(claim)
    ref = claim_ref(claim)
    with DraClient(plugin.paths.dra_socket) as client:
        entry = client.prepare_v1beta1([ref]).claims[ref.uid]
        assert entry.error == ""
        assert [d.device_name for d in entry.devices] == ["gpu-1-mig-1g10gb-2"]
        [(_, _, start)] = mig_instances(plugin)
        assert start == 2
        assert client.unprepare_v1beta1([ref]).claims[ref.uid].error == ""
    assert mig_instances(plugin) == []
    assert checkpoint_uids(plugin) == set()


def test_many_claims_in_one_call_each_get_an_answer(plugin: PluginProcess) -> None:
    claims = [vgpu_claim(f"c{i}", pool=NODE, gpu=i % 8, memory="1Gi", cores="5") for i in range(96)]
    for c in claims:
        plugin.claims.put(c)
    refs = [claim_ref(c) for c in claims]
    ghost = claim_ref(vgpu_claim("never-stored", pool=NODE))
    wrong_uid = claim_ref({**claims[0], "metadata": {**claims[0]["metadata"], "uid": "0000-not-it"}})
    with DraClient(plugin.paths.dra_socket) as client:
        answers = client.prepare([*refs, ghost, wrong_uid])
        assert set(answers.claims) == {r.uid for r in refs} | {ghost.uid, wrong_uid.uid}
        assert all(answers.claims[r.uid].error == "" for r in refs)
        assert "not found" in answers.claims[ghost.uid].error
        assert answers.claims[wrong_uid.uid].error != ""
        assert len(list(plugin.paths.cdi_dir.iterdir())) == 96
        unanswers = client.unprepare(refs)
        assert all(unanswers.claims[r.uid].error == "" for r in refs)
    assert list(plugin.paths.cdi_dir.iterdir()) == []
    assert checkpoint_uids(plugin) == set()


def test_health_stream_lists_every_device(plugin: PluginProcess) -> None:
    with DraClient(plugin.paths.dra_socket) as client, client.watch_health(timeout=10) as stream:
        first = next(stream)
    names = {d.device.device_name for d in first.devices}
    assert {"gpu-0", "gpu-0-vgpu", "gpu-7", "gpu-7-vgpu", "gpu-0-mig-1g10gb-6"} <= names
    assert {d.health for d in first.devices} == {health_v1_pb2.HEALTHY}
    assert {d.device.pool_name for d in first.devices} == {NODE}


def test_sigterm_removes_the_sockets(plugin: PluginProcess) -> None:
    assert plugin.paths.dra_socket.exists() and plugin.paths.registration_socket.exists()
    assert plugin.terminate() == 0
    assert not plugin.paths.dra_socket.exists()
    assert not plugin.paths.registration_socket.exists()


def test_sigkill_leaves_stale_sockets_that_a_restart_replaces(plugin: PluginProcess) -> None:
    assert plugin.proc is not None
    plugin.proc.send_signal(signal.SIGKILL)
    plugin.wait_exit()
    assert plugin.paths.dra_socket.exists()  # nobody cleaned up
    plugin.start()
    with DraClient(plugin.paths.dra_socket) as client:
        assert client.prepare([]).claims == {}


def test_two_instances_share_the_node_and_serialise_on_the_lock(root: Path) -> None:
    old = PluginProcess(root=root, pod_uid="pod-old").start()
    new = PluginProcess(root=root, pod_uid="pod-new").start()
    try:
        assert old.paths.dra_socket != new.paths.dra_socket
        assert new.paths.registration_socket.name == "gpu.tessera.dev-pod-new-reg.sock"
        claim = vgpu_claim("rolling", pool=NODE, gpu=0)
        old.claims.put(claim)
        ref = claim_ref(claim)
        with DraClient(old.paths.dra_socket) as a, DraClient(new.paths.dra_socket) as b:
            fd = os.open(old.paths.lock_file, os.O_RDWR | os.O_CREAT)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX)  # whoever holds the lock, neither instance may touch the node
                for client in (a, b):
                    with pytest.raises(grpc.RpcError) as info:
                        client.prepare([ref], timeout=0.5)
                    assert info.value.code() == grpc.StatusCode.DEADLINE_EXCEEDED
            finally:
                os.close(fd)
            assert a.prepare([ref]).claims[ref.uid].error == ""
            assert b.prepare([ref]).claims[ref.uid].error == ""  # the new pod sees the old pod's work
            assert b.unprepare([ref]).claims[ref.uid].error == ""
            assert not old.paths.cdi_spec_file(ref.uid).exists()
        assert old.terminate() == 0
        assert new.paths.dra_socket.exists()  # the old pod removed only its own sockets
        assert not old.paths.dra_socket.exists()
    finally:
        cleanup([old, new], root)


def test_the_daemon_replaces_an_mps_control_daemon_that_died_without_a_restart(root: Path) -> None:
    """Issue #20: after a GPU's control daemon was gone, only a plugin restart recovered. The node daemon's
    MPS watch starts a new one within a round (2 s) while it keeps serving."""
    mps_dir = Path(tempfile.mkdtemp(prefix="tmw-", dir="/tmp"))  # short: the sockets' paths must fit
    p = PluginProcess(
        root=root, extra_args=("--mps-control", str(FAKE_MPS_CONTROL), "--mps-dir", str(mps_dir))
    ).start()
    try:
        c = allocated_claim(
            "m", device="gpu-0-mps", family=mps.NAME, pool=NODE, consumed={"memory": "1Gi", "cores": "30"}
        )
        c["status"]["allocation"]["devices"]["results"][0]["shareID"] = str(uuid.uuid4())
        p.claims.put(c)
        with DraClient(p.paths.dra_socket) as client:
            assert client.prepare([claim_ref(c)]).claims[c["metadata"]["uid"]].error == ""
        control = MpsControl(root=mps_dir, tool=str(FAKE_MPS_CONTROL))
        ((gpu, old),) = [(s.gpu_uuid, s.pid) for s in control.running()]
        assert old is not None
        os.kill(old, signal.SIGKILL)
        deadline = time.monotonic() + 15
        while time.monotonic() < deadline:
            # the daemon starts the new control daemon, then links every claim to it: done when both are
            states = control.running()
            new = bool(states) and states[0].pid not in (None, old) and states[0].answering
            if new and control.problem(gpu_uuid=gpu) is None:
                break
            time.sleep(0.1)
        assert [(s.gpu_uuid, s.answering) for s in control.running()] == [(gpu, True)]
        assert control.running()[0].pid != old and control.problem(gpu_uuid=gpu) is None
        assert "MPS control daemon replaced" in p.log_file.read_text()
    finally:
        cleanup([p], root)
        stop_mps_daemons(mps_dir)
        shutil.rmtree(mps_dir, ignore_errors=True)
