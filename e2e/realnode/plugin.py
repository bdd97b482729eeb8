"""Tessera's node plugin on the real node: its instances, each with the identity a DaemonSet pod gives it (a
Pod object the real kubelet runs as a sleeper, `e2e.plugin_identity`, and a token bound to it) and that pod's
UID as `--pod-uid`, so a second instance can run beside the first during an upgrade. The daemon itself runs on
the host: `python -m kubelet_plugin.daemon --root <node root> --simulate ... --driver-library-dir <fake
driver>`.
"""

from __future__ import annotations

import json
import os
import signal
import time
from dataclasses import dataclass
from pathlib import Path

from kubernetes import client as k8s

from e2e.controlplane.processes import is_alive, log_tail, stop_record
from e2e.controlplane.state import ComponentRecord
from e2e.fake_mps import FAKE_MPS_CONTROL, stop_mps_daemons
from e2e.kube import Json, get_pod, is_running, wait_for
from e2e.node import REPO_ROOT, driver_slices, pool_complete, spawn_python
from e2e.plugin_identity import SYSTEM_NS, PluginCredentials, issue, plugin_pod, revoke
from e2e.realnode.config import PROBE_IMAGE
from e2e.realnode.errors import RealNodeError
from kubelet_plugin.paths import PluginPaths

# The node's "host" driver directory: the fake driver's build, mounted into containers in place.
DRIVER_DIR = REPO_ROOT / "interceptor" / "build" / "fake"
REGISTERED_EVENT = "registered with the kubelet"


def identity_pod(*, node: str) -> Json:
    """The plugin's Pod as the DaemonSet would place it, runnable here: the probe image sleeping (the daemon
    itself runs on the host, started by RealNode), tolerating the real node's taints."""
    pod = plugin_pod(node=node)
    pod["metadata"]["labels"] = {
        "app.kubernetes.io/name": "tessera",
        "app.kubernetes.io/component": "node-plugin",
    }
    pod["spec"]["containers"] = [
        {"name": "plugin", "image": PROBE_IMAGE, "command": ["/bin/sleep", "2147483647"]}
    ]
    pod["spec"]["tolerations"] = [{"operator": "Exists"}]
    pod["spec"]["terminationGracePeriodSeconds"] = 1
    return pod


def log_events(path: Path, *, offset: int = 0) -> list[Json]:
    """The JSON log records a plugin wrote to `path` after byte `offset`."""
    try:
        data = path.read_bytes()[offset:]
    except FileNotFoundError:
        return []
    events = []
    for line in data.decode(errors="replace").splitlines():
        if line.startswith("{"):
            try:
                events.append(json.loads(line))
            except json.JSONDecodeError:
                continue
    return events


@dataclass(frozen=True, slots=True)
class PluginInstance:
    """One running plugin: its process, its identity (Pod object, token) and where it logs."""

    credentials: PluginCredentials
    process: ComponentRecord
    log: Path
    log_offset: int  # where this run's output starts in `log`

    @property
    def pod_uid(self) -> str:
        return self.credentials.pod_uid

    def events(self) -> list[Json]:
        return log_events(self.log, offset=self.log_offset)

    def registrations(self) -> int:
        """How often a kubelet told this instance it is registered (NotifyRegistrationStatus)."""
        return sum(1 for e in self.events() if e.get("event") == REGISTERED_EVENT)


class PluginRunner:
    def __init__(
        self, *, api: k8s.ApiClient, admin_kubeconfig: Path, node_name: str, node_file: Path, root: Path
    ) -> None:
        self.api = api
        self.admin_kubeconfig = admin_kubeconfig
        self.name = node_name
        self.node_file = node_file
        self.root = root
        self.running: list[PluginInstance] = []
        self._runs = 0

    @property
    def sim_state_file(self) -> Path:
        return self.root / "sim-state.json"

    def new_identity(self, *, index: int) -> PluginCredentials:
        """A plugin Pod on this node (run by the kubelet) and a token bound to it."""
        credentials = issue(
            self.api,
            node=self.name,
            admin_kubeconfig=self.admin_kubeconfig,
            kubeconfig=self.root / f"plugin-{index}.kubeconfig",
            pod_manifest=identity_pod(node=self.name),
        )
        wait_for(
            f"plugin pod {credentials.pod} to run on {self.name}",
            lambda: is_running(get_pod(self.api, SYSTEM_NS, credentials.pod)),
            timeout_s=60,
        )
        return credentials

    def start(
        self, *, credentials: PluginCredentials | None = None, timeout_s: float = 60.0
    ) -> PluginInstance:
        """Starts a plugin instance (a new identity unless `credentials` is given) and waits until the kubelet
        registered it and its pool is published."""
        self._runs += 1
        if credentials is None:
            credentials = self.new_identity(index=self._runs)
        log_path = self.root / "logs" / f"plugin-{credentials.pod_uid[:8]}.log"
        offset = log_path.stat().st_size if log_path.exists() else 0
        process = spawn_python(
            name="plugin",
            args=[
                "-m",
                "kubelet_plugin.daemon",
                f"--node-name={self.name}",
                f"--root={self.root}",
                f"--pod-uid={credentials.pod_uid}",
                f"--simulate={self.node_file}",
                f"--sim-state={self.sim_state_file}",
                f"--kubeconfig={credentials.kubeconfig}",
                f"--driver-library-dir={DRIVER_DIR}",
                f"--mps-control={FAKE_MPS_CONTROL}",
                "--log-format=json",
            ],
            log_path=log_path,
            die_with_parent=True,
        )
        instance = PluginInstance(credentials=credentials, process=process, log=log_path, log_offset=offset)
        self.running.append(instance)
        self.wait_registered(instance, timeout_s=timeout_s)
        return instance

    def wait_registered(self, instance: PluginInstance, *, timeout_s: float = 60.0) -> None:
        """Until the kubelet told this instance it is registered (NotifyRegistrationStatus) and the pool is
        complete."""

        def registered() -> bool:
            if not is_alive(instance.process.pid):
                raise RealNodeError(f"the plugin exited:\n{log_tail(instance.log)}")
            return instance.registrations() > 0

        wait_for(f"the kubelet of {self.name} to register the plugin", registered, timeout_s=timeout_s)
        wait_for(
            f"the pool of {self.name}",
            lambda: pool_complete(driver_slices(self.api, self.name)),
            timeout_s=timeout_s,
        )

    @property
    def current(self) -> PluginInstance:
        """The newest running instance (the one the kubelet sends calls to)."""
        if not self.running:
            raise RealNodeError(f"no plugin runs on {self.name}")
        return self.running[-1]

    def stop(self, instance: PluginInstance, *, revoke_identity: bool = True) -> None:
        """SIGTERM (the plugin removes its sockets); the identity pod goes too unless kept for a restart."""
        stop_record(instance.process, grace_s=15.0)
        self.running.remove(instance)
        if revoke_identity:
            revoke(self.api, pod=instance.credentials.pod)

    def kill(self, instance: PluginInstance) -> None:
        """SIGKILL: a crash; the sockets stay behind, as after a real one."""
        if is_alive(instance.process.pid):
            os.kill(instance.process.pid, signal.SIGKILL)
        while is_alive(instance.process.pid):
            time.sleep(0.05)
        self.running.remove(instance)

    def stop_all(self) -> None:
        for instance in list(self.running):
            self.stop(instance)
        stop_mps_daemons(PluginPaths.under(self.root).mps_dir)  # they outlive the plugin, by design
