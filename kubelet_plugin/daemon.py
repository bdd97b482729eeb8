"""The node daemon's command line and life cycle (`kubelet_plugin.serving.plugin_instance` assembles the
parts).

Start: `tessera plugin --node-name N [...]` or `python -m kubelet_plugin.daemon --node-name N [...]`.
SIGTERM or SIGINT stops it gracefully: the sockets go away, calls in flight get `STOP_GRACE_S` to finish.
"""

from __future__ import annotations

import argparse
import os
import signal
import sys
import threading
from collections.abc import Sequence
from pathlib import Path
from types import FrameType
from typing import TYPE_CHECKING

import structlog

from dra_driver.core.foreign_plugins import SPLIT_FLAG
from dra_driver.io.logs import configure
from dra_driver.io.metrics_server import parse_address
from dra_driver.vocabulary.errors import ConfigError, TesseraError
from kubelet_plugin import host_parts
from kubelet_plugin.node.file_modes import UMASK, set_umask
from kubelet_plugin.record.steps import NO_OBSERVER, StepObserver
from kubelet_plugin.serving.options import (
    HEALTH_INTERVAL_S,
    LOG_FORMAT,
    LOG_LEVEL,
    USAGE_STATUS_INTERVAL_S,
    DaemonOptions,
    add_path_arguments,
    with_paths,
)
from kubelet_plugin.serving.probe import add_probe_command

if TYPE_CHECKING:
    from kubelet_plugin.serving.node_setup import ClaimsFrom

STOP_GRACE_S = 5.0
log = structlog.get_logger(__name__)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--node-name",
        default=os.environ.get("NODE_NAME"),
        help="this node's name: the ResourceSlice pool (default: $NODE_NAME)",
    )
    add_path_arguments(parser)
    parser.add_argument("--simulate", type=Path, metavar="FILE", help="simulated node file instead of NVML")
    parser.add_argument(
        "--sim-state", type=Path, metavar="FILE", help="where the simulated node keeps its state"
    )
    parser.add_argument("--kubeconfig", type=Path, help="API server credentials (default: in-cluster)")
    parser.add_argument("--library-path", type=Path, help="host path of libtessera.so for vgpu containers")
    for flag in host_parts.options():  # the host parts' own (--mps-dir, ...)
        parser.add_argument(flag.flag, dest=flag.dest, metavar=flag.metavar, help=flag.help)
    parser.add_argument(
        "--driver-root",
        metavar="DIR|auto",
        help="where the NVIDIA driver's files are on the host: / (installed on the host), "
        "/run/nvidia/driver (GPU Operator) or auto; NVML is loaded from there and claims' containers get its "
        "libraries and tools (default: none: NVML from the loader's search path, no driver files)",
    )
    parser.add_argument(
        "--driver-root-mount",
        type=Path,
        metavar="DIR",
        help="where this process sees --driver-root (the chart mounts it at /driver-root; with auto, "
        "where the host's / is seen); default: the host path itself",
    )
    parser.add_argument(
        "--driver-library-dir",
        dest="driver_library_dirs",
        type=Path,
        action="append",
        default=[],
        metavar="DIR",
        help="host directory of NVIDIA driver libraries/tools to mount into containers (repeatable)",
    )
    parser.add_argument(
        "--settings", type=Path, help="node settings file (resource.tessera.dev/v1 NodeSettings)"
    )
    parser.add_argument(
        "--health-interval", type=float, default=HEALTH_INTERVAL_S, help="seconds between health checks"
    )
    parser.add_argument(
        "--recover-fatal-xids",
        action="store_true",
        help="untaint a GPU once its XID/ECC faults are no longer reported (default: held until restart)",
    )
    parser.add_argument(
        "--metrics-address",
        default="",
        metavar="HOST:PORT",
        help="serve /metrics and /healthz here (e.g. :9400); empty (the default) serves nothing",
    )
    parser.add_argument(
        "--usage-status-interval",
        type=float,
        default=USAGE_STATUS_INTERVAL_S,
        metavar="SECONDS",
        help="write vgpu claims' usage into their status at most this often (0: never)",
    )
    parser.add_argument(
        "--no-publish", dest="publish", action="store_false", help="do not publish ResourceSlices"
    )
    parser.add_argument(
        SPLIT_FLAG,
        action="store_true",
        default=os.environ.get("TESSERA_GPUS_SPLIT_WITH_DEVICE_PLUGIN", "").lower() in ("1", "true", "yes"),
        help="publish even where the Node advertises nvidia.com/gpu (another device plugin): its GPUs and "
        "Tessera's are split by configuration (default: publish nothing there; or set "
        "$TESSERA_GPUS_SPLIT_WITH_DEVICE_PLUGIN=true)",
    )
    parser.add_argument("--log-format", choices=("json", "console"), default=LOG_FORMAT)
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default=LOG_LEVEL)


def options_from(args: argparse.Namespace) -> DaemonOptions:
    if not args.node_name:
        raise SystemExit("--node-name is required (or set $NODE_NAME)")
    if args.sim_state is not None and args.simulate is None:
        raise SystemExit("--sim-state needs --simulate FILE")
    if args.metrics_address:
        try:
            parse_address(args.metrics_address)
        except ConfigError as e:
            raise SystemExit(str(e)) from e
    if args.usage_status_interval < 0:
        raise SystemExit("--usage-status-interval: seconds must be 0 (off) or more")
    if args.driver_root_mount is not None and args.driver_root is None:
        raise SystemExit("--driver-root-mount needs --driver-root (the host path it shows, or auto)")
    options = DaemonOptions(
        node_name=args.node_name,
        simulate=args.simulate,
        sim_state=args.sim_state,
        kubeconfig=args.kubeconfig,
        library_path=args.library_path,
        driver_library_dirs=tuple(args.driver_library_dirs),
        driver_root=args.driver_root,
        driver_root_mount=args.driver_root_mount,
        host_options=tuple(
            (f.dest, value)
            for f in host_parts.options()
            if (value := getattr(args, f.dest, None)) is not None
        ),
        settings=args.settings,
        health_interval=args.health_interval,
        recover_fatal_xids=args.recover_fatal_xids,
        metrics_address=args.metrics_address,
        usage_status_interval=args.usage_status_interval,
        publish=args.publish,
        gpus_split_with_device_plugin=args.gpus_split_with_device_plugin,
        log_format=args.log_format,
        log_level=args.log_level,
    )
    return with_paths(options, args)


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `tessera plugin` subcommand; `kubelet_plugin.command` adds it to `tessera`."""
    parser = subparsers.add_parser("plugin", help="run the kubelet plugin (node daemon)")
    add_arguments(parser)
    parser.set_defaults(handler=run_from_args)
    add_probe_command(parser)  # `tessera plugin probe`, the liveness check


def run_from_args(args: argparse.Namespace) -> int:
    return serve(options_from(args))


def serve(
    options: DaemonOptions, *, steps: StepObserver = NO_OBSERVER, claims: ClaimsFrom | None = None
) -> int:
    """Configure logging and run until SIGTERM/SIGINT; 1 when the daemon cannot start.

    `steps` and `claims` are for a program that embeds the daemon (a test harness); the command line has
    neither.
    """
    configure(level=options.log_level, fmt="json" if options.log_format == "json" else "console")
    try:
        return run(options, steps=steps, claims=claims)
    except TesseraError as e:
        log.error("the node plugin cannot run", error=str(e))
        return 1


def stop_on_signals() -> threading.Event:
    """An event SIGTERM and SIGINT set (the command lines that serve until told to stop)."""
    stop = threading.Event()

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("stopping", signal=signal.Signals(signum).name)
        stop.set()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    return stop


def run(
    options: DaemonOptions, *, steps: StepObserver = NO_OBSERVER, claims: ClaimsFrom | None = None
) -> int:
    from kubelet_plugin.serving.node_setup import claim_access  # noqa: PLC0415 - keeps `--help` fast
    from kubelet_plugin.serving.plugin_instance import Node  # noqa: PLC0415

    inherited = set_umask()
    if inherited != UMASK:
        log.info("umask set", inherited=oct(inherited), now=oct(UMASK))
    stop = stop_on_signals()
    node = Node.start(options, steps=steps, claims=claims or claim_access)
    try:
        while not stop.wait(1.0):
            pass
    finally:
        node.stop(grace=STOP_GRACE_S)
    log.info("stopped")
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera-plugin", description=__doc__)
    add_arguments(parser)
    return run_from_args(parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
