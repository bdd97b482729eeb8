"""`tessera plugin probe` against a real running plugin (in-process, real sockets), dead and silent sockets,
an impostor on the registration socket, and the chart's liveness command."""

from __future__ import annotations

import shutil
import socket
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator
from concurrent import futures
from pathlib import Path
from typing import Any

import grpc
import pytest
import yaml

from kubelet_plugin.command import build_parser
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.proto.gen import pluginregistration_pb2_grpc
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.plugin_instance import Node
from kubelet_plugin.serving.probe import DEFAULT_TIMEOUT_S, probe
from kubelet_plugin.serving.registration import RegistrationServicer
from tests.support.claim_files import directory_claims

REPO = Path(__file__).resolve().parents[4]
NODE_FILE = REPO / "e2e" / "nodes" / "h100x8.yaml"
MANIFESTS = REPO / "deploy" / "manifests" / "tessera.yaml"

pytestmark = pytest.mark.timeout(60)


@pytest.fixture
def root() -> Iterator[Path]:
    # short: unix socket paths may not pass 108 bytes, pytest's tmp_path can
    path = Path(tempfile.mkdtemp(prefix="tsp-", dir="/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def start_plugin(root: Path, pod_uid: str | None = None) -> Node:
    (root / "claims").mkdir(exist_ok=True)
    options = DaemonOptions(
        node_name="node-a",
        root=root,
        pod_uid=pod_uid,
        simulate=NODE_FILE,
        sim_state=root / "sim-state.json",
        health_interval=60.0,
        publish=False,
        log_level="warning",
    )
    return Node.start(options, claims=directory_claims(root / "claims"))


def probe_cli(*args: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-m", "kubelet_plugin.command", "plugin", "probe", *args],
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=30,
        check=False,
    )


def test_a_running_plugin_is_healthy(root: Path) -> None:
    node = start_plugin(root)
    try:
        paths = PluginPaths.under(root)
        result = probe(paths, timeout=5)
        assert result.healthy, result.reason
        done = probe_cli("--root", str(root), "--timeout", "5")
        assert (done.returncode, done.stderr) == (0, "")
    finally:
        node.stop(grace=0)
    # the same sockets, once the plugin stopped
    after = probe(PluginPaths.under(root), timeout=2)
    assert not after.healthy
    assert "no socket at" in after.reason


def test_per_pod_socket_names_follow_the_pod_uid(root: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    node = start_plugin(root, pod_uid="pod-1")
    try:
        assert probe(PluginPaths.under(root, pod_uid="pod-1"), timeout=5).healthy
        other = probe(PluginPaths.under(root, pod_uid="pod-2"), timeout=5)
        assert not other.healthy
        assert "gpu.tessera.dev-pod-2-reg.sock" in other.reason
        monkeypatch.setenv("POD_UID", "pod-1")  # the DaemonSet passes it through the downward API
        assert probe_cli("--root", str(root)).returncode == 0
    finally:
        node.stop(grace=0)


def dead_socket(path: Path) -> None:
    """A socket file nobody listens on any more, as a crashed plugin leaves it."""
    path.parent.mkdir(parents=True, exist_ok=True)
    s = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    s.bind(str(path))
    s.close()


def test_dead_sockets_are_unhealthy_with_one_line_on_stderr(root: Path) -> None:
    paths = PluginPaths.under(root)
    dead_socket(paths.registration_socket)
    dead_socket(paths.dra_socket)
    started = time.monotonic()
    done = probe_cli("--root", str(root), "--timeout", "3")
    assert done.returncode == 1
    lines = done.stderr.splitlines()
    assert len(lines) == 1, done.stderr
    assert "registration socket" in lines[0]
    assert "UNAVAILABLE" in lines[0]
    assert time.monotonic() - started < 15


def test_a_silent_socket_times_out(root: Path) -> None:
    paths = PluginPaths.under(root)
    paths.registry_dir.mkdir(parents=True)
    paths.plugin_dir.mkdir(parents=True)
    with socket.socket(socket.AF_UNIX, socket.SOCK_STREAM) as listener:
        listener.bind(str(paths.registration_socket))
        listener.listen(8)  # accepts connections, never speaks HTTP/2
        dead_socket(paths.dra_socket)
        started = time.monotonic()
        result = probe(paths, timeout=0.5)
        elapsed = time.monotonic() - started
    assert not result.healthy
    assert "no answer within 0.5s" in result.reason
    assert elapsed < 3


@pytest.fixture
def impostor(root: Path) -> Iterator[tuple[PluginPaths, Any]]:
    """A registration socket served by the real servicer, configured for another driver."""
    paths = PluginPaths.under(root)
    paths.registry_dir.mkdir(parents=True)
    paths.plugin_dir.mkdir(parents=True)
    dead_socket(paths.dra_socket)
    server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))

    def serve(driver: str, endpoint: Path) -> None:
        pluginregistration_pb2_grpc.add_RegistrationServicer_to_server(
            RegistrationServicer(dra_socket=endpoint, driver_name=driver), server
        )
        server.add_insecure_port(f"unix://{paths.registration_socket}")
        server.start()

    yield paths, serve
    server.stop(grace=None)


def test_another_drivers_registration_is_unhealthy(impostor: tuple[PluginPaths, Any]) -> None:
    paths, serve = impostor
    serve("other.example.com", paths.dra_socket)
    result = probe(paths, timeout=5)
    assert not result.healthy
    assert "serves driver 'other.example.com', not 'gpu.tessera.dev'" in result.reason


def test_a_registration_naming_another_endpoint_is_unhealthy(impostor: tuple[PluginPaths, Any]) -> None:
    paths, serve = impostor
    serve("gpu.tessera.dev", paths.plugin_dir / "dra-old.sock")
    result = probe(paths, timeout=5)
    assert not result.healthy
    assert "names DRA endpoint" in result.reason
    assert "dra-old.sock" in result.reason


def test_a_live_registration_with_a_dead_dra_socket_is_unhealthy(impostor: tuple[PluginPaths, Any]) -> None:
    paths, serve = impostor
    serve("gpu.tessera.dev", paths.dra_socket)
    result = probe(paths, timeout=5)
    assert not result.healthy
    assert result.reason.startswith(f"DRA socket {paths.dra_socket}: UNAVAILABLE")


def test_bad_timeout_is_refused(root: Path) -> None:
    done = probe_cli("--root", str(root), "--timeout", "0")
    assert done.returncode == 1
    assert "--timeout must be positive" in done.stderr


def liveness_probes() -> list[dict[str, Any]]:
    found = []
    for doc in yaml.safe_load_all(MANIFESTS.read_text(encoding="utf-8")):
        if doc and doc.get("kind") == "DaemonSet":
            for c in doc["spec"]["template"]["spec"]["containers"]:
                found.append(c["livenessProbe"])
    return found


def test_the_charts_liveness_command_is_the_probe() -> None:
    probes = liveness_probes()
    assert probes, f"no DaemonSet with a liveness probe in {MANIFESTS}"
    for lp in probes:
        command = lp["exec"]["command"]
        assert command[:3] == ["tessera", "plugin", "probe"]
        args = build_parser().parse_args(command[1:])
        assert args.handler.__module__ == "kubelet_plugin.serving.probe"
        # the probe gives up before the kubelet kills it, so the kubelet sees our reason
        assert args.timeout < lp["timeoutSeconds"]
        assert args.root is None  # the real kubelet paths
    assert DEFAULT_TIMEOUT_S > 0


def test_ready_only_once_the_kubelet_registered_it_and_not_after_it_stopped(root: Path) -> None:
    from tests.support.kubelet_client import register  # noqa: PLC0415

    node = start_plugin(root, pod_uid="p-ready")
    paths = PluginPaths.under(root, pod_uid="p-ready")
    try:
        alive = probe_cli("--root", str(root), "--pod-uid", "p-ready", "--timeout", "5")
        assert alive.returncode == 0, alive.stderr
        early = probe_cli("--root", str(root), "--pod-uid", "p-ready", "--ready", "--timeout", "5")
        assert early.returncode == 1
        assert "not yet registered with the kubelet" in early.stderr
        register(paths.registration_socket, accept=False, error="refused for the test")
        assert not paths.ready_file.exists()
        register(paths.registration_socket)
        ready = probe_cli("--root", str(root), "--pod-uid", "p-ready", "--ready", "--timeout", "5")
        assert (ready.returncode, ready.stderr) == (0, "")
    finally:
        node.stop(grace=0)
    assert not paths.ready_file.exists()
