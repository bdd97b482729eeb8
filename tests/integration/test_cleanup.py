"""`tessera cleanup` on a node the real daemon prepared vgpu, MIG and MPS claims on (simulated GPUs, the fake
MPS control tool), driven over its unix sockets as the kubelet drives it, and `--once`/`--dry-run` by hand."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import grpc
import pytest

from dra_driver.backends import open_backend
from dra_driver.core.families import mig, mps, vgpu
from dra_driver.vocabulary.names import GpuUUID, ready_file_name
from kubelet_plugin.host_parts.mps.control import MpsControl
from kubelet_plugin.node.host_process import wait_gone
from kubelet_plugin.record.results import ClaimRef
from kubelet_plugin.record.steps import Step
from kubelet_plugin.removal.cleanup_marker import cleanup_done, cleanup_done_file
from kubelet_plugin.removal.cleanup_node import REMOVAL_MESSAGE
from tests.support.doubles.fake_mps import FAKE_MPS_CONTROL, stop_mps_daemons
from tests.support.doubles.interceptor_programs import FAKE_GPU0, FAKE_GPU1
from tests.support.faults import Faults
from tests.support.kubelet_client import DraClient, register
from tests.support.plugin_process import NODE, REPO, PluginProcess, cleanup, short_root
from tests.support.sample_claims import allocated_claim, claim_ref

pytestmark = [
    pytest.mark.timeout(180),
    pytest.mark.skipif(not FAKE_MPS_CONTROL.exists(), reason="run `make dev` to build the fake MPS tool"),
]
MPS_GPU = GpuUUID("GPU-7e55e7a0-1234-4567-89ab-cdef00000002")
ADMIN_GPU = GpuUUID("GPU-a100a100-0000-0000-0000-000000000003")
# GPU 0: MIG (Tessera switches MIG mode on); GPU 1: vgpu; GPU 2: MPS; GPU 3: an A100 an administrator put in
# MIG mode, with an instance of their own
NODE_YAML = f"""apiVersion: sim.tessera.dev/v1
kind: SimulatedNode
nodeName: {NODE}
gpus:
- product: H100-80GB-SXM
  uuid: {FAKE_GPU0}
- product: H100-80GB-SXM
  uuid: {FAKE_GPU1}
- product: H100-80GB-SXM
  uuid: {MPS_GPU}
- product: A100-SXM4-80GB
  uuid: {ADMIN_GPU}
  migEnabled: true
"""


@dataclass
class CleanupProcess(PluginProcess):
    """`tessera cleanup` in serve mode, claims from the same directory as the daemon's."""

    done_file: Path | None = None

    def command(self) -> list[str]:
        return [
            sys.executable,
            "-m",
            "tests.support.cleanup_daemon",
            "--node-name",
            NODE,
            "--root",
            str(self.root),
            "--simulate",
            str(self.node_file),
            "--sim-state",
            str(self.sim_state),
            "--claims-dir-source",
            str(self.root / "claims"),
            "--mps-control",
            str(FAKE_MPS_CONTROL),
            "--log-format",
            "json",
            "--pod-uid",
            str(self.pod_uid),
        ]

    def events(self, name: str) -> list[dict[str, Any]]:
        out = []
        for line in self.log().splitlines():
            try:
                doc = json.loads(line)
            except ValueError:
                continue
            if isinstance(doc, dict) and doc.get("event") == name:
                out.append(doc)
        return out


@dataclass
class Node:
    root: Path
    plugin: PluginProcess
    admin_instance: str

    @property
    def paths(self) -> Any:
        return self.plugin.paths

    def gpus(self) -> dict[str, tuple[bool, list[str]]]:
        backend = open_backend(simulate=self.plugin.node_file, state_file=self.plugin.sim_state)
        try:
            return {
                g.uuid: (g.mig_enabled, [i.uuid for i in g.mig_instances]) for g in backend.inventory().gpus
            }
        finally:
            backend.close()

    def mps_pids(self) -> list[int | None]:
        control = MpsControl(root=self.paths.family_dir(mps.NAME), tool=str(FAKE_MPS_CONTROL))
        return [s.pid for s in control.running()]

    def leftovers(self) -> list[str]:
        """Everything below the root that Tessera could have put there."""
        p = self.paths
        found = [str(x) for x in p.cdi_dir.rglob("*")]  # the CDI directory is every vendor's
        for base in (p.claims_dir, p.gpus_dir, p.family_dir(mps.NAME), p.library_path.parent, p.plugin_dir):
            if base.exists():
                found += [str(x) for x in base.rglob("*")] or [str(base)]
        return found

    def cleanup_cli(self, *flags: str) -> subprocess.CompletedProcess[str]:
        """`tessera cleanup` as a user runs it by hand (no API server: nothing is known about claims)."""
        return subprocess.run(
            [
                sys.executable,
                "-m",
                "kubelet_plugin.command",
                "cleanup",
                "--node-name",
                NODE,
                "--root",
                str(self.root),
                "--simulate",
                str(self.plugin.node_file),
                "--sim-state",
                str(self.plugin.sim_state),
                "--mps-control",
                str(FAKE_MPS_CONTROL),
                "--log-format",
                "json",
                *flags,
            ],
            cwd=REPO,
            env={k: v for k, v in os.environ.items() if not k.startswith("KUBERNETES_")},
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )


@pytest.fixture
def node() -> Iterator[Node]:
    root = short_root()
    node_file = root / "node.yaml"
    node_file.write_text(NODE_YAML)
    plugin = PluginProcess(
        root=root, node_file=node_file, extra_args=("--mps-control", str(FAKE_MPS_CONTROL))
    )
    backend = open_backend(simulate=node_file, state_file=plugin.sim_state)
    try:
        admin = backend.create_mig_instance(gpu=ADMIN_GPU, profile_id=19, start=0)
    finally:
        backend.close()
    library = plugin.paths.library_path  # what the chart's install step puts on the host
    library.parent.mkdir(parents=True)
    library.write_bytes(b"\x7fELF not really")
    try:
        yield Node(root=root, plugin=plugin.start(), admin_instance=admin.uuid)
    finally:
        stop_mps_daemons(plugin.paths.family_dir(mps.NAME))
        cleanup([plugin], root)


def prepared(node: Node) -> dict[str, ClaimRef]:
    """A vgpu, a MIG and an MPS claim prepared by the node daemon, which then stops (helm uninstall)."""
    claims = {
        "vgpu": allocated_claim(
            "vgpu",
            device="gpu-1-vgpu",
            family=vgpu.NAME,
            pool=NODE,
            consumed={"memory": "10Gi", "cores": "50"},
        ),
        "mig": allocated_claim("mig", device="gpu-0-mig-1g10gb-0", family=mig.NAME, pool=NODE),
        "mps": allocated_claim(
            "mps", device="gpu-2-mps", family=mps.NAME, pool=NODE, consumed={"memory": "10Gi", "cores": "30"}
        ),
    }
    for c in claims.values():
        node.plugin.claims.put(c)
    refs = {k: claim_ref(c) for k, c in claims.items()}
    with DraClient(node.paths.dra_socket) as client:
        answer = client.prepare(list(refs.values()))
    assert {uid: a.error for uid, a in answer.claims.items()} == {r.uid: "" for r in refs.values()}
    assert node.plugin.terminate() == 0
    return refs


def test_serve_mode_refuses_prepares_serves_unprepares_and_cleans_the_node_after_the_last(node: Node) -> None:
    refs = prepared(node)
    (mps_pid,) = node.mps_pids()
    assert mps_pid is not None
    gpus = node.gpus()
    (tessera_instance,) = gpus[FAKE_GPU0][1]
    assert gpus[FAKE_GPU0][0] is True  # Tessera switched MIG mode on
    views = sorted(p.name for p in node.paths.gpus_dir.iterdir())
    assert views == [FAKE_GPU1]
    # what a SIGKILLed instance leaves when its pod is then deleted: its ready file, its socket not served
    crashed = node.paths.plugin_dir / ready_file_name("0f1e-crashed")
    crashed.write_bytes(b"ready\n")

    remover = CleanupProcess(root=node.root, pod_uid="cleanup", node_file=node.plugin.node_file)
    remover.start()
    try:
        assert register(remover.paths.registration_socket).info.name == "gpu.tessera.dev"
        done = cleanup_done_file(node.root)
        fresh = allocated_claim("late", device="gpu-1-vgpu", family=vgpu.NAME, pool=NODE)
        node.plugin.claims.put(fresh)
        with DraClient(remover.paths.dra_socket) as client:
            answer = client.prepare([claim_ref(fresh), refs["vgpu"]])
            assert [answer.claims[r.uid].error for r in (claim_ref(fresh), refs["vgpu"])] == [
                REMOVAL_MESSAGE
            ] * 2
            assert not answer.claims[refs["vgpu"].uid].devices

            gone = client.unprepare([refs["vgpu"], refs["mps"]])
            assert {uid: a.error for uid, a in gone.claims.items()} == {
                refs["vgpu"].uid: "",
                refs["mps"].uid: "",
            }
            assert wait_gone(mps_pid, 10)  # the real unprepare stopped the GPU's MPS control daemon
            time.sleep(1.5)
            assert not cleanup_done(done)  # the MIG claim is still prepared
            assert node.paths.library_path.exists() and node.gpus()[FAKE_GPU0][1] == [tessera_instance]

            assert client.unprepare([refs["mig"]]).claims[refs["mig"].uid].error == ""
            deadline = time.monotonic() + 20
            while not cleanup_done(done):
                assert time.monotonic() < deadline, remover.log()
                time.sleep(0.1)

            gpus = node.gpus()
            assert gpus[FAKE_GPU0] == (False, [])  # instance destroyed, MIG mode back off
            assert gpus[ADMIN_GPU] == (True, [node.admin_instance])  # the administrator's untouched
            assert node.mps_pids() == []
            # nothing of Tessera's is left but the running instance's own socket (and the lock its calls take)
            assert node.leftovers() == [str(remover.paths.dra_socket)] + (
                [str(remover.paths.lock_file)] if remover.paths.lock_file.exists() else []
            )
            (event,) = remover.events("node clean")
            went = event["removed"]
            for expected in (
                f"mig-instance {tessera_instance}",
                f"mig-mode {FAKE_GPU0}",
                f"mps-daemon {MPS_GPU}",
                f"gpu-view {node.paths.gpus_dir / FAKE_GPU1}",
                f"library {node.paths.library_path}",
                f"plugin-state {node.paths.checkpoint_file}",
                f"plugin-state {crashed}",
                f"directory {node.paths.family_dir(mps.NAME)}",
            ):
                assert expected in went, went
            assert any(line.startswith("cdi-spec ") for line in went), went
            assert any(line.startswith("claim-dir ") for line in went), went

            # still serving: unprepares of claims it no longer knows succeed, again and again
            for _ in range(2):
                again = client.unprepare([refs["mig"], claim_ref(fresh)])
                assert {a.error for a in again.claims.values()} == {""}
        assert remover.terminate() == 0
    finally:
        remover.kill()
    assert node.leftovers() == []
    assert not remover.paths.registration_socket.exists()


def test_once_refuses_while_claims_are_prepared_and_names_them(node: Node) -> None:
    refs = prepared(node)
    before = node.leftovers()
    for flags in (("--once",), ("--dry-run",)):
        done = node.cleanup_cli(*flags)
        assert done.returncode == 1, done.stderr
        assert done.stdout == ""
        for r in refs.values():
            assert f"{r.namespace}/{r.name} (UID {r.uid})" in done.stderr
        assert "Delete their pods first" in done.stderr
    assert node.leftovers() == before and node.mps_pids() != []


def test_dry_run_removes_nothing_once_cleans_and_a_second_once_removes_nothing(node: Node) -> None:
    refs = prepared(node)
    node.plugin.start()  # the kubelet unprepared everything before the plugin went
    with DraClient(node.paths.dra_socket) as client:
        assert {a.error for a in client.unprepare(list(refs.values())).claims.values()} == {""}
    before = node.leftovers()
    busy = node.cleanup_cli("--once")  # not while a node plugin serves
    assert busy.returncode == 1 and f"still serves this node ({node.paths.dra_socket})" in busy.stderr
    assert node.leftovers() == before
    assert node.plugin.terminate() == 0
    before = node.leftovers()

    dry = node.cleanup_cli("--dry-run")
    assert dry.returncode == 0, dry.stderr
    would = dry.stdout.splitlines()
    assert f"gpu-view {node.paths.gpus_dir / FAKE_GPU1}" in would
    assert f"library {node.paths.library_path}" in would
    assert "nothing was removed" in dry.stderr
    assert node.leftovers() == before

    once = node.cleanup_cli("--once")
    assert once.returncode == 0, once.stderr
    assert once.stdout.splitlines() == would
    assert node.leftovers() == []
    assert node.gpus()[ADMIN_GPU] == (True, [node.admin_instance])

    again = node.cleanup_cli("--once")
    assert (again.returncode, again.stdout) == (0, ""), again.stderr
    assert "nothing to remove" in again.stderr


def test_an_interrupted_unprepare_is_finished_by_once_with_the_plugins_own_code(node: Node) -> None:
    """The daemon died mid-unprepare of the MIG claim (its entry UnprepareStarted): --dry-run names the
    instance and MIG mode to go, --once finishes the unprepare and removes them; the administrator's stays."""
    refs = prepared(node)
    fault = Faults(kill_at=frozenset({Step.UNPREPARE_AFTER_CHECKPOINT_STARTED}), claim=refs["mig"].uid)
    node.plugin.start(extra_env=fault.env())
    with DraClient(node.paths.dra_socket) as client:
        assert {a.error for a in client.unprepare([refs["vgpu"], refs["mps"]]).claims.values()} == {""}
        with pytest.raises(grpc.RpcError):
            client.unprepare([refs["mig"]])
    node.plugin.wait_exit()
    (tessera_instance,) = node.gpus()[FAKE_GPU0][1]

    dry = node.cleanup_cli("--dry-run")
    assert dry.returncode == 0, dry.stderr
    assert f"mig-instance {tessera_instance}" in dry.stdout.splitlines()
    assert f"mig-mode {FAKE_GPU0}" in dry.stdout.splitlines()
    assert node.gpus()[FAKE_GPU0] == (True, [tessera_instance])

    once = node.cleanup_cli("--once")
    assert once.returncode == 0, once.stderr
    went = once.stdout.splitlines()
    assert f"mig-instance {tessera_instance}" in went and f"mig-mode {FAKE_GPU0}" in went
    assert node.gpus()[FAKE_GPU0] == (False, [])
    assert node.gpus()[ADMIN_GPU] == (True, [node.admin_instance])
    assert node.leftovers() == []
