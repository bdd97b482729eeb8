"""What a node daemon is started with: the command line's options as a value (`kubelet_plugin.daemon` parses
them, `kubelet_plugin.wiring` assembles a daemon from them)."""

from __future__ import annotations

from dataclasses import dataclass, replace
from pathlib import Path

from kubelet_plugin.mps_control import DEFAULT_TOOL as MPS_CONTROL_TOOL
from kubelet_plugin.paths import PluginPaths

HEALTH_INTERVAL_S = 5.0
USAGE_STATUS_INTERVAL_S = 60.0
LOG_FORMAT = "json"
LOG_LEVEL = "info"


@dataclass(frozen=True, slots=True)
class DaemonOptions:
    """The command line's options; the defaults are the command line's too."""

    node_name: str
    root: Path | None = None
    pod_uid: str | None = None
    simulate: Path | None = None
    sim_state: Path | None = None
    kubeconfig: Path | None = None
    library_path: Path | None = None
    mps_dir: Path | None = None  # None: the layout's (PluginPaths)
    mps_control: str = MPS_CONTROL_TOOL
    driver_library_dirs: tuple[Path, ...] = ()
    settings: Path | None = None
    health_interval: float = HEALTH_INTERVAL_S
    recover_fatal_xids: bool = False
    metrics_address: str = ""  # HOST:PORT of /metrics and /healthz; empty: no endpoint
    usage_status_interval: float = USAGE_STATUS_INTERVAL_S  # 0: no usage in claim status
    publish: bool = True
    log_format: str = LOG_FORMAT
    log_level: str = LOG_LEVEL

    def paths(self) -> PluginPaths:
        base = (
            PluginPaths.under(self.root, pod_uid=self.pod_uid)
            if self.root is not None
            else PluginPaths.defaults(pod_uid=self.pod_uid)
        )
        return replace(
            base,
            library_path=self.library_path or base.library_path,
            mps_dir=self.mps_dir or base.mps_dir,
        )
