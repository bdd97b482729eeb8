"""Tessera on the real node as a user installs it: our image (`make image`) imported into the node's
containerd, `helm install deploy/helm/tessera`, and the node plugin running only in the chart's DaemonSet
container — registered through the kubelet's plugin watcher, with the identity the kubelet projects into it.

What differs from a production node, and why, is only in `values()`: every host path below the node's short
root (several nodes share this machine), the driver root a directory laid out like a host install with the
fake driver (`e2e.realnode.driver`), the host network with the API server's loopback address (pods here have
no route to it), and the MPS daemons' cgroup below the node's cgroup root. The chart is used as shipped.
"""

from __future__ import annotations

import json
import os
import signal
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.core.families import mps
from e2e.controlplane.processes import is_alive
from e2e.harness.kube import Json, WaitTimeoutError, wait_for
from e2e.harness.node import REPO_ROOT, driver_slices, pool_complete
from e2e.harness.plugin_identity import SYSTEM_NS
from e2e.harness.webhook import ca_bundle
from e2e.realnode.config import REALNODE_LABEL, REALNODE_TAINT_KEY
from e2e.realnode.driver import FakeDriverRoot
from e2e.realnode.errors import RealNodeError
from e2e.realnode.pod_logs import parse_cri_log
from kubelet_plugin.node.paths import PluginPaths

log = structlog.get_logger(__name__)

CHART = REPO_ROOT / "deploy" / "helm" / "tessera"
RELEASE = "tessera"
CLEANUP_RELEASE = "tessera-cleanup"
IMAGE_REPOSITORY = "tessera.dev/tessera"
NODE_GROUP = "realnode"
REGISTERED_EVENT = "registered with the kubelet"
PLUGIN_LABELS = "app.kubernetes.io/name=tessera,app.kubernetes.io/component=node-plugin"
CLEANUP_LABELS = "app.kubernetes.io/name=tessera,app.kubernetes.io/component=cleanup"
ADMISSION = "tessera-admission"  # the webhook's Deployment, Service, Secret and configuration
ADMISSION_LABELS = "app.kubernetes.io/name=tessera,app.kubernetes.io/component=admission"


def _last_line(command: Sequence[str], what: str) -> Path:
    done = subprocess.run(command, capture_output=True, text=True, cwd=REPO_ROOT, check=False, timeout=1800)
    lines = done.stdout.strip().splitlines()
    if done.returncode != 0 or not lines:
        raise RealNodeError(f"{what} failed ({done.returncode}):\n{done.stderr[-2000:]}")
    return Path(lines[-1])


def helm_binary() -> Path:
    """The helm of deploy/helm/build-helm.sh (built from its Go module unless one is on PATH)."""
    return _last_line(["bash", "deploy/helm/build-helm.sh"], "building helm")


def image_archive() -> Path:
    """The node plugin image's OCI archive (`make image`; a no-op when up to date)."""
    return _last_line(["bash", "deploy/image/build.sh"], "building the node plugin image")


def chart_version() -> str:
    chart = yaml.safe_load((CHART / "Chart.yaml").read_text(encoding="utf-8"))
    return str(chart["appVersion"])


@dataclass(frozen=True, slots=True)
class PluginPod:
    """One pod of the chart's DaemonSet on the node, as the API shows it, and its container logs."""

    name: str
    uid: str
    ready: bool
    restarts: int
    created: str
    log_dir: Path  # <podLogsDir>/<ns>_<name>_<uid>/<container>

    def events(self) -> list[Json]:
        """The plugin's JSON log records (it logs to stderr), every run of the container in order."""
        runs = sorted((p for p in self.log_dir.glob("*.log") if p.stem.isdigit()), key=lambda p: int(p.stem))
        found: list[Json] = []
        for path in runs:
            for line in parse_cri_log(path.read_text(errors="replace"), stream="stderr"):
                if line.startswith("{"):
                    try:
                        found.append(json.loads(line))
                    except json.JSONDecodeError:
                        continue
        return found

    def logged(self, event: str, *, timeout_s: float = 10.0, **fields: str) -> list[Json]:
        """The records of `event` whose `fields` match, waiting up to `timeout_s` for a first one: the
        runtime copies the container's stderr to its log file on its own time, so a line can land a moment
        after what it tells of (an admission answer, a Ready probe) was seen. Empty if none came."""

        def matching() -> list[Json]:
            return [
                e
                for e in self.events()
                if e.get("event") == event and all(e.get(k) == v for k, v in fields.items())
            ]

        try:
            found: list[Json] = wait_for(f"{event} {fields} in the log", matching, timeout_s=timeout_s)
        except WaitTimeoutError:
            return []
        return found

    def registrations(self) -> int:
        """How often a kubelet told this pod's plugin it is registered (NotifyRegistrationStatus)."""
        return sum(1 for e in self.events() if e.get("event") == REGISTERED_EVENT)


class ChartPlugin:
    """The chart's releases on one real node: install, upgrade, uninstall, and what its pods do."""

    def __init__(
        self,
        *,
        api: k8s.ApiClient,
        admin_kubeconfig: Path,
        server: str,
        node_name: str,
        root: Path,
        pod_logs: Path,
        driver: FakeDriverRoot,
        cgroup_root: str,
        helm: Path,
    ) -> None:
        self.api = api
        self.admin_kubeconfig = admin_kubeconfig
        self.server = server
        self.name = node_name
        self.root = root
        self.pod_logs = pod_logs
        self.driver = driver
        self.cgroup_root = cgroup_root
        self.helm_path = helm
        self.image_tag = chart_version()

    # ---- helm ---------------------------------------------------------------------------------------------

    def values(self, *, metrics_port: int) -> Json:
        paths = PluginPaths.under(self.root)
        host, _, port = self.server.removeprefix("https://").rpartition(":")
        return {
            "image": {"repository": IMAGE_REPOSITORY, "tag": self.image_tag, "pullPolicy": "Never"},
            "nodeGroups": [
                {
                    "name": NODE_GROUP,
                    "nodeSelector": {"tessera.dev/realnode": "true"},
                    "families": ["gpu", "vgpu", "mps", "mig"],
                    "vgpuShares": 10,
                }
            ],
            "tolerations": [{"operator": "Exists"}],
            "hostPaths": {
                "kubeletPlugins": str(paths.plugin_dir.parent),
                "kubeletRegistry": str(paths.registry_dir),
                "cdi": str(paths.cdi_dir),
                "library": str(paths.library_path.parent),
                "claims": str(paths.claims_dir),
                "gpus": str(paths.gpus_dir),
                "mps": str(paths.family_dir(mps.NAME)),
            },
            "driverRoot": str(self.driver.root),
            "mps": {"control": "", "hostCgroup": f"/{self.cgroup_root}/tessera-mps"},
            "extraEnv": [{"name": k, "value": v} for k, v in self.driver.plugin_env().items()],
            "hostNetwork": True,
            "apiServer": {"host": host, "port": port},
            "metrics": {"enabled": True, "port": metrics_port, "service": True},
            "healthInterval": 2,
            "logLevel": "info",
            # The testbed applied the chart's DeviceClasses, policies and the stand-in plugins' account (their
            # tokens are bound to it): this release has an account and role of its own and leaves the shared
            # objects alone, so that `helm uninstall` (test_real_uninstall.py) takes nothing from them.
            "serviceAccount": {"name": "tessera-realnode-plugin"},
            "deviceClasses": {"install": False},
            "admissionPolicies": {"opaqueConfig": False, "nodeSlices": False},
        }

    def helm(self, *args: str, timeout_s: float = 300.0) -> subprocess.CompletedProcess[str]:
        env = {
            **os.environ,
            "KUBECONFIG": str(self.admin_kubeconfig),
            "HELM_CACHE_HOME": str(self.root / "helm"),
        }
        env["HELM_CONFIG_HOME"] = env["HELM_DATA_HOME"] = str(self.root / "helm")
        done = subprocess.run(
            [str(self.helm_path), *args],
            capture_output=True,
            text=True,
            env=env,
            timeout=timeout_s,
            check=False,
        )
        if done.returncode != 0:
            raise RealNodeError(f"helm {' '.join(args)} failed ({done.returncode}):\n{done.stderr.strip()}")
        return done

    def _values_file(self, name: str, values: Json) -> Path:
        path = self.root / "config" / f"{name}.values.yaml"
        path.write_text(yaml.safe_dump(values, sort_keys=True))
        return path

    def install(self, *, metrics_port: int, timeout_s: float = 180.0) -> PluginPod:
        """`helm install`, then until the plugin pod is Ready (registered, its pool published) and the pool is
        complete."""
        values = self._values_file(RELEASE, self.values(metrics_port=metrics_port))
        started = time.monotonic()
        self.helm("install", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "-f", str(values))
        pod = self.wait_ready(timeout_s=timeout_s)
        log.info("realnode.chart_installed", node=self.name, seconds=round(time.monotonic() - started, 1))
        return pod

    def upgrade(self, *set_values: str, image_tag: str | None = None, timeout_s: float = 180.0) -> None:
        """`helm upgrade --reuse-values` with `--set` pairs (and a new image tag); does not wait."""
        args = ["upgrade", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--reuse-values"]
        if image_tag is not None:
            args += ["--set", f"image.tag={image_tag}"]
        for pair in set_values:
            args += ["--set", pair]
        self.helm(*args, timeout_s=timeout_s)

    def set_node_group(self, *, metrics_port: int, **settings: object) -> None:
        """`helm upgrade --reuse-values` with the node group's settings changed (a values file with the whole
        group: `--set nodeGroups[0].x` would replace the list with a group of `x` alone); does not wait. No
        settings: the group as installed."""
        (group,) = self.values(metrics_port=metrics_port)["nodeGroups"]
        path = self._values_file(f"{RELEASE}-group", {"nodeGroups": [{**group, **settings}]})
        self.helm("upgrade", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--reuse-values", "-f", str(path))

    def uninstall(self, release: str = RELEASE) -> None:
        self.helm("uninstall", release, "--namespace", SYSTEM_NS, "--wait", "--timeout", "120s")

    def webhook_values(self, *, port: int, metrics_port: int) -> Json:
        """`admissionWebhook` for the real node. The host network, as for the plugin: a pod's own network here
        is a tap device in its namespace with nothing behind it (config.cni_config), so the API server could
        not reach a pod address. There the port is a host port, so one replica is all one node holds."""
        return {
            "admissionWebhook": {
                "enabled": True,
                "replicas": 1,
                "hostNetwork": True,
                "port": port,
                "metrics": {"enabled": True, "port": metrics_port},  # a host port too
                "nodeSelector": {REALNODE_LABEL: "true"},
                "tolerations": [{"key": REALNODE_TAINT_KEY, "operator": "Exists", "effect": "NoSchedule"}],
            }
        }

    def enable_webhook(self, *, port: int, metrics_port: int) -> None:
        """`helm upgrade --reuse-values` with the webhook on, as a user turns it on for an installed release;
        does not wait."""
        path = self._values_file(ADMISSION, self.webhook_values(port=port, metrics_port=metrics_port))
        args = ["upgrade", RELEASE, str(CHART), "--namespace", SYSTEM_NS, "--reuse-values", "-f", str(path)]
        self.helm(*args)

    def disable_webhook(self) -> None:
        self.upgrade("admissionWebhook.enabled=false")

    def webhook_endpoints(self) -> dict[str, str]:
        """The ready endpoints of the webhook Service's EndpointSlices, where the API server calls it:
        "ip:port" → the pod behind it."""
        slices = k8s.DiscoveryV1Api(self.api).list_namespaced_endpoint_slice(
            SYSTEM_NS, label_selector=f"kubernetes.io/service-name={ADMISSION}"
        )
        found: dict[str, str] = {}
        for s in slices.items:
            ports = [p.port for p in s.ports or [] if p.name == "https"]  # not its metrics port
            for e in s.endpoints or []:
                if e.conditions is not None and e.conditions.ready:
                    pod = e.target_ref.name if e.target_ref is not None else None
                    found |= {f"{a}:{p}": str(pod) for a in e.addresses for p in ports}
        return found

    def wait_webhook_serving(self, *, timeout_s: float = 120.0) -> PluginPod:
        """Once the webhook is on: its pod Ready, its CA in the configuration's caBundle and the Service
        leading to it, so that the API server's calls reach it (its failurePolicy is Fail)."""
        pod = self.wait_ready(labels=ADMISSION_LABELS, timeout_s=timeout_s)
        wait_for("the caBundle in the webhook's configuration", lambda: ca_bundle(self.api))
        wait_for(f"a ready endpoint of Service {ADMISSION}", self.webhook_endpoints)
        return pod

    def wait_webhook_gone(self) -> None:
        """Once the webhook is off: its pods gone and the Secret it kept its TLS in deleted (the webhook made
        it, not helm: it outlives the release's objects)."""
        wait_for("the webhook's pods to go", lambda: not self.pods(ADMISSION_LABELS), timeout_s=60)
        try:
            k8s.CoreV1Api(self.api).delete_namespaced_secret(f"{ADMISSION}-tls", SYSTEM_NS)
        except ApiException as e:
            if e.status != 404:
                raise

    def install_cleanup(self, *, metrics_port: int) -> None:
        values = self.values(metrics_port=metrics_port) | {"cleanup": {"enabled": True}}
        path = self._values_file(CLEANUP_RELEASE, values)
        self.helm("install", CLEANUP_RELEASE, str(CHART), "--namespace", SYSTEM_NS, "-f", str(path))

    # ---- the pods -----------------------------------------------------------------------------------------

    def pods(self, labels: str = PLUGIN_LABELS) -> list[PluginPod]:
        """The chart's pods on this node, oldest first."""
        response: Any = k8s.CoreV1Api(self.api).list_namespaced_pod(
            SYSTEM_NS,
            label_selector=labels,
            field_selector=f"spec.nodeName={self.name}",
            _preload_content=False,
        )
        found = []
        for item in json.loads(response.data).get("items") or []:
            meta, status = item["metadata"], item.get("status") or {}
            conditions = {c["type"]: c["status"] for c in status.get("conditions") or []}
            statuses = status.get("containerStatuses") or []
            container = statuses[0]["name"] if statuses else "plugin"
            found.append(
                PluginPod(
                    name=meta["name"],
                    uid=meta["uid"],
                    ready=conditions.get("Ready") == "True" and not meta.get("deletionTimestamp"),
                    restarts=sum(int(s.get("restartCount") or 0) for s in statuses),
                    created=meta["creationTimestamp"],
                    log_dir=self.pod_logs / f"{SYSTEM_NS}_{meta['name']}_{meta['uid']}" / container,
                )
            )
        return sorted(found, key=lambda p: p.created)

    @property
    def current(self) -> PluginPod:
        """The newest Ready plugin pod (the one the kubelet sends calls to)."""
        ready = [p for p in self.pods() if p.ready]
        if not ready:
            raise RealNodeError(f"no Ready plugin pod on {self.name}: {self.pods()}")
        return ready[-1]

    def wait_settled(self, *, timeout_s: float = 120.0) -> PluginPod:
        """Until the plugin's rollout is over: one plugin pod on the node, Ready, its pool complete. A
        `helm upgrade` keeps the old pod serving beside the new one until the new one is Ready (wait_ready
        may answer with either); a scenario that kills `current` must not start before the old one is
        gone."""

        def single() -> PluginPod | None:
            pods = self.pods()
            return pods[0] if len(pods) == 1 and pods[0].ready else None

        pod: PluginPod = wait_for(
            f"one Ready plugin pod on {self.name} (the rollout over)",
            single,
            timeout_s=timeout_s,
            interval_s=0.5,
        )
        wait_for(f"the pool of {self.name}", lambda: pool_complete(driver_slices(self.api, self.name)))
        return pod

    def wait_ready(self, *, timeout_s: float = 120.0, labels: str = PLUGIN_LABELS) -> PluginPod:
        pod: PluginPod = wait_for(
            f"a Ready pod of the chart on {self.name}",
            lambda: next((p for p in reversed(self.pods(labels)) if p.ready), None),
            timeout_s=timeout_s,
            interval_s=0.5,
        )
        if labels == PLUGIN_LABELS:
            wait_for(f"the pool of {self.name}", lambda: pool_complete(driver_slices(self.api, self.name)))
        return pod

    def process_of(self, pod: PluginPod) -> int | None:
        """The host pid of the container's main process: `tessera plugin` (or `cleanup`) with POD_UID=<uid>
        in its environment; the probes' processes (`tessera plugin probe`) have the same environment."""
        wanted = f"POD_UID={pod.uid}".encode()
        for entry in Path("/proc").iterdir():
            if not entry.name.isdigit():
                continue
            try:
                argv = (entry / "cmdline").read_bytes().split(b"\0")
                if b"probe" in argv or not ({b"plugin", b"cleanup"} & set(argv)):
                    continue
                if wanted in (entry / "environ").read_bytes().split(b"\0"):
                    return int(entry.name)
            except OSError:
                continue
        return None

    def kill(self, pod: PluginPod) -> None:
        """SIGKILL the plugin in `pod`'s container: a crash; the kubelet restarts the container."""
        pid = self.process_of(pod)
        if pid is None:
            raise RealNodeError(f"no plugin process of pod {pod.name} found")
        os.kill(pid, signal.SIGKILL)
        while is_alive(pid):
            time.sleep(0.05)
