"""The real node daemon as a subprocess in a private root, with claims in a directory and a node's GPUs either
simulated (`--simulate`) or behind the NVML backend over the fake libnvidia-ml (`nvml=True`)."""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from collections.abc import Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field
from pathlib import Path

import yaml

from dra_driver.backends import open_backend
from dra_driver.backends.base import GpuBackend
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.record.checkpoint_store import CheckpointStore
from tests.support.claim_files import DirectoryClaimSource
from tests.support.doubles.fake_nvml import FakeNvmlNode, pynvml_on_fake
from tests.support.faults import FAULT_CLAIM_ENV, FAULT_ENV
from tests.support.kubelet_client import is_served, register, wait_for_socket
from tests.support.swept_dirs import swept_names

REPO = Path(__file__).resolve().parents[2]
NODE_FILE = REPO / "e2e" / "nodes" / "h100x8.yaml"
NODE = "node-a"


def unreachable_kubeconfig(root: Path) -> Path:
    """Credentials for an API server nobody serves: enough for a daemon that is never asked about a claim."""
    path = root / "kubeconfig"
    path.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "none", "cluster": {"server": "https://127.0.0.1:1"}}],
                "users": [{"name": "none", "user": {"token": "unused"}}],
                "contexts": [{"name": "none", "context": {"cluster": "none", "user": "none"}}],
                "current-context": "none",
            }
        )
    )
    return path


def short_root() -> Path:
    """A root short enough for unix socket paths (108 bytes), unlike pytest's tmp_path."""
    return Path(tempfile.mkdtemp(prefix="tsr-", dir="/tmp"))


@dataclass
class PluginProcess:
    """One daemon; several may share a root (rolling update) with distinct pod UIDs."""

    root: Path
    pod_uid: str | None = None
    env: dict[str, str] = field(default_factory=dict)
    # `tessera plugin ...` as a user runs it (claims from an API server that is never called) instead of
    # `python -m tests.support.daemon ...` (claims from a directory, faults from TESSERA_FAULT)
    via_cli: bool = False
    nvml: bool = False  # the NVML backend over the fake libnvidia-ml instead of `--simulate`
    umask: int = -1  # the umask the daemon inherits (-1: this process's)
    node_file: Path = NODE_FILE
    extra_args: tuple[str, ...] = ()
    proc: subprocess.Popen[bytes] | None = None

    @property
    def paths(self) -> PluginPaths:
        return PluginPaths.under(self.root, pod_uid=self.pod_uid)

    @property
    def claims(self) -> DirectoryClaimSource:
        return DirectoryClaimSource(root=self.root / "claims")

    @property
    def sim_state(self) -> Path:
        return self.root / "sim-state.json"

    @property
    def fake_nvml(self) -> FakeNvmlNode:
        return FakeNvmlNode(node_file=self.node_file, state_dir=self.root / "fake-nvml")

    @property
    def log_file(self) -> Path:
        return self.root / f"plugin-{self.pod_uid or 'main'}.log"

    def command(self) -> list[str]:
        entry = ["kubelet_plugin.command", "plugin"] if self.via_cli else ["tests.support.daemon"]
        cmd = [sys.executable, "-m", *entry, "--node-name", NODE, "--root", str(self.root)]
        if not self.nvml:
            cmd += ["--simulate", str(self.node_file), "--sim-state", str(self.sim_state)]
        if self.via_cli:
            cmd += ["--kubeconfig", str(unreachable_kubeconfig(self.root))]
        else:
            cmd += ["--claims-dir-source", str(self.root / "claims")]
        cmd += ["--no-publish", "--log-format", "json"]
        if self.pod_uid:
            cmd += ["--pod-uid", self.pod_uid]
        return cmd + list(self.extra_args)

    def start(self, *, wait: bool = True, extra_env: Mapping[str, str] | None = None) -> PluginProcess:
        env = {**(self.fake_nvml.env() if self.nvml else os.environ), **self.env}
        env.pop(FAULT_ENV, None)  # only a test that asks for a fault gets one
        env.pop(FAULT_CLAIM_ENV, None)
        env.update(extra_env or {})
        with self.log_file.open("ab") as log:
            self.proc = subprocess.Popen(
                self.command(), env=env, stdout=log, stderr=log, cwd=REPO, umask=self.umask
            )
        if wait:
            self.wait_ready()
        return self

    def wait_ready(self, timeout: float = 30.0) -> None:
        deadline = time.monotonic() + timeout
        while not is_served(self.paths.registration_socket):
            if self.proc is not None and self.proc.poll() is not None:
                raise RuntimeError(f"daemon exited with {self.proc.returncode}:\n{self.log()}")
            if time.monotonic() > deadline:
                raise TimeoutError(f"daemon not ready within {timeout}s:\n{self.log()}")
            time.sleep(0.02)
        wait_for_socket(self.paths.dra_socket)

    def register(self) -> None:
        register(self.paths.registration_socket)

    def log(self) -> str:
        return self.log_file.read_text(errors="replace") if self.log_file.exists() else ""

    def terminate(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        self.proc.send_signal(signal.SIGTERM)
        return self.proc.wait(timeout)

    def kill(self) -> None:
        if self.proc is not None and self.proc.poll() is None:
            self.proc.kill()
            self.proc.wait(10)

    def wait_exit(self, timeout: float = 15.0) -> int:
        assert self.proc is not None
        return self.proc.wait(timeout)


@contextmanager
def node_backend(p: PluginProcess) -> Iterator[GpuBackend]:
    """The GPUs the daemon sees, read from this process (the simulated state file, or the fake NVML's)."""
    if not p.nvml:
        backend = open_backend(simulate=p.node_file, state_file=p.sim_state)
        try:
            yield backend
        finally:
            backend.close()
        return
    with pynvml_on_fake(p.fake_nvml):
        backend = open_backend(simulate=None, state_file=None)
        try:
            yield backend
        finally:
            backend.close()


def node_state(p: PluginProcess) -> tuple[list[str], list[str], list[str], list[tuple[int, int]], list[bool]]:
    """(CDI dir entries, claim dirs, checkpoint claims, MIG instances, MIG mode per GPU)."""
    cdi = sorted(x.name for x in p.paths.cdi_dir.iterdir()) if p.paths.cdi_dir.exists() else []
    dirs = swept_names(p.paths.claims_dir)  # removal hands trees to a background sweeper
    store = CheckpointStore(path=p.paths.checkpoint_file)
    entries = sorted(str(u) for u in store.load(boot_id="-").claims) if store.path.exists() else []
    with node_backend(p) as backend:
        gpus = backend.inventory().gpus
    mig = [(g.index, m.start) for g in gpus for m in g.mig_instances]
    return cdi, dirs, entries, mig, [g.mig_enabled for g in gpus]


def cleanup(processes: Sequence[PluginProcess], root: Path) -> None:
    for p in processes:
        p.kill()
    shutil.rmtree(root, ignore_errors=True)
