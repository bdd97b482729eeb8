"""What a node daemon is started with: the command line's options as a value (`kubelet_plugin.daemon` parses
them, `kubelet_plugin.serving.plugin_instance` assembles a daemon from them)."""

from __future__ import annotations

import argparse
import os
from dataclasses import dataclass, replace
from pathlib import Path

from dra_driver.vocabulary.names import DRIVER_NAME
from kubelet_plugin.node.paths import PluginPaths

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
    driver_library_dirs: tuple[Path, ...] = ()
    driver_root: str | None = None  # host path or "auto"; None: no driver files for containers
    driver_root_mount: Path | None = None  # where this process sees the driver root (None: its host path)
    host_options: tuple[
        tuple[str, str], ...
    ] = ()  # the host parts' own flags given (kubelet_plugin.host_parts)
    # the host paths the chart mounts in place (None: the layout's, PluginPaths)
    kubelet_plugins_dir: Path | None = None
    kubelet_registry_dir: Path | None = None
    cdi_dir: Path | None = None
    claims_dir: Path | None = None
    gpus_dir: Path | None = None
    settings: Path | None = None
    health_interval: float = HEALTH_INTERVAL_S
    recover_fatal_xids: bool = False
    metrics_address: str = ""  # HOST:PORT of /metrics and /healthz; empty: no endpoint
    usage_status_interval: float = USAGE_STATUS_INTERVAL_S  # 0: no usage in claim status
    publish: bool = True
    # another GPU device plugin's resources on the Node do not stop publishing: the GPUs are split
    gpus_split_with_device_plugin: bool = False
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
            plugin_dir=(self.kubelet_plugins_dir / DRIVER_NAME)
            if self.kubelet_plugins_dir
            else base.plugin_dir,
            registry_dir=self.kubelet_registry_dir or base.registry_dir,
            cdi_dir=self.cdi_dir or base.cdi_dir,
            claims_dir=self.claims_dir or base.claims_dir,
            gpus_dir=self.gpus_dir or base.gpus_dir,
            library_path=self.library_path or base.library_path,
        )


# Host directories the chart mounts in place, by flag: (flag, DaemonOptions field, what it is).
_HOST_DIR_FLAGS = (
    ("--kubelet-plugins-dir", "kubelet_plugins_dir", "the kubelet's plugins directory (DRA socket, state)"),
    ("--kubelet-registry-dir", "kubelet_registry_dir", "the kubelet's plugin registry (registration socket)"),
    ("--cdi-dir", "cdi_dir", "where the container runtime reads transient CDI specs"),
    ("--claims-dir", "claims_dir", "the claims' directories (limits file, accounting region)"),
    ("--gpus-dir", "gpus_dir", "the shared GPUs' views (time-division schedule, priority holds)"),
)


def add_path_arguments(parser: argparse.ArgumentParser) -> None:
    """Where the plugin's sockets and files are: `tessera plugin` and its probe take the same flags."""
    parser.add_argument("--root", type=Path, help="relocate every host path below this directory (tests)")
    parser.add_argument(
        "--pod-uid",
        default=os.environ.get("POD_UID") or None,
        help="per-pod socket names, for rolling updates (default: $POD_UID)",
    )
    for flag, dest, what in _HOST_DIR_FLAGS:
        parser.add_argument(
            flag, dest=dest, type=Path, metavar="DIR", help=f"{what} (default: the standard path)"
        )


def _absolute(args: argparse.Namespace, dest: str) -> Path | None:
    value: Path | None = getattr(args, dest)
    if value is not None and not value.is_absolute():
        flag = next(f for f, d, _ in _HOST_DIR_FLAGS if d == dest)
        raise SystemExit(f"{flag}: {value} is not an absolute path (the kubelet and the runtime need one)")
    return value


def with_paths(options: DaemonOptions, args: argparse.Namespace) -> DaemonOptions:
    """`options` with what `add_path_arguments` parsed; relative directories are refused."""
    return replace(
        options,
        root=args.root.resolve() if args.root is not None else None,
        pod_uid=args.pod_uid,
        kubelet_plugins_dir=_absolute(args, "kubelet_plugins_dir"),
        kubelet_registry_dir=_absolute(args, "kubelet_registry_dir"),
        cdi_dir=_absolute(args, "cdi_dir"),
        claims_dir=_absolute(args, "claims_dir"),
        gpus_dir=_absolute(args, "gpus_dir"),
    )
