"""`tessera plugin probe`: the DaemonSet's liveness check, through the plugin's own sockets, and with
`--ready` its readiness check (also registered with the kubelet and its pool published: readiness.py).

Healthy when, within the timeout, the registration socket answers GetInfo with our driver name and the DRA
endpoint, and that endpoint answers a NodePrepareResources without claims (which takes no lock, so a long
prepare of another instance cannot make a healthy plugin look dead). Exit 0 healthy, 1 not, and one line on
stderr saying why.
"""

from __future__ import annotations

import argparse
import sys
import time
from dataclasses import dataclass

from dra_driver.vocabulary.names import DRIVER_NAME
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.serving.options import DaemonOptions, add_path_arguments, with_paths

DEFAULT_TIMEOUT_S = 5.0
EXIT_HEALTHY, EXIT_UNHEALTHY = 0, 1


@dataclass(frozen=True, slots=True)
class ProbeResult:
    healthy: bool
    reason: str


def _remaining(deadline: float) -> float:
    left = deadline - time.monotonic()
    if left <= 0:
        raise TimeoutError
    return left


def probe(paths: PluginPaths, *, timeout: float = DEFAULT_TIMEOUT_S) -> ProbeResult:
    """Asks both sockets, sharing one deadline; never raises."""
    import grpc  # noqa: PLC0415 - keeps `tessera --help` fast

    from kubelet_plugin.proto.gen import (  # noqa: PLC0415
        dra_v1_pb2,
        dra_v1_pb2_grpc,
        pluginregistration_pb2,
        pluginregistration_pb2_grpc,
    )

    deadline = time.monotonic() + timeout
    registration, dra = paths.registration_socket, paths.dra_socket
    step = f"registration socket {registration}"
    try:
        for path in (registration, dra):
            if not path.is_socket():
                return ProbeResult(False, f"no socket at {path}")
        with grpc.insecure_channel(f"unix://{registration}") as channel:
            info = pluginregistration_pb2_grpc.RegistrationStub(channel).GetInfo(
                pluginregistration_pb2.InfoRequest(), timeout=_remaining(deadline)
            )
        if info.name != DRIVER_NAME:
            return ProbeResult(False, f"{step} serves driver {info.name!r}, not {DRIVER_NAME!r}")
        if info.endpoint != str(dra):
            return ProbeResult(False, f"{step} names DRA endpoint {info.endpoint!r}, expected {str(dra)!r}")
        step = f"DRA socket {dra}"
        with grpc.insecure_channel(f"unix://{dra}") as channel:
            answer = dra_v1_pb2_grpc.DRAPluginStub(channel).NodePrepareResources(
                dra_v1_pb2.NodePrepareResourcesRequest(), timeout=_remaining(deadline)
            )
        if answer.claims:
            return ProbeResult(False, f"{step} answered claims nobody asked about: {sorted(answer.claims)}")
    except TimeoutError:
        return ProbeResult(False, f"{step}: no answer within {timeout}s")
    except grpc.RpcError as e:
        code = e.code() if isinstance(e, grpc.Call) else None
        if code == grpc.StatusCode.DEADLINE_EXCEEDED:
            return ProbeResult(False, f"{step}: no answer within {timeout}s")
        details = e.details() if isinstance(e, grpc.Call) else str(e)
        return ProbeResult(False, f"{step}: {code.name if code else 'error'}: {details}")
    return ProbeResult(True, f"healthy: {DRIVER_NAME} answers on {registration} and {dra}")


def add_probe_command(plugin_parser: argparse.ArgumentParser) -> None:
    """Adds `probe` below `tessera plugin`; `kubelet_plugin.daemon.add_cli` calls this."""
    sub = plugin_parser.add_subparsers(dest="plugin_command", metavar="{probe}")
    p = sub.add_parser(
        "probe",
        help="liveness check: exit 0 when the running plugin answers on its sockets, 1 when not",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_path_arguments(p)  # the same as the plugin's: it must find the plugin's sockets
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds for both checks")
    p.add_argument(
        "--ready",
        action="store_true",
        help="readiness: also registered with the kubelet and the pool published (exit 1 until then)",
    )
    # it logs nothing (its one line goes to stderr itself): `tessera` leaves structlog unloaded
    p.set_defaults(handler=run_from_args, logs=False)


def add_plugin_with_probe_alone(
    subparsers: argparse._SubParsersAction[argparse.ArgumentParser], *, help: str
) -> None:
    """`tessera plugin` holding only `probe`, for `tessera plugin probe` (kubelet_plugin.command): the
    DaemonSet runs it every 30 s on every node, and the daemon's own flags would import every host part to
    read theirs. The probe's parser and its name are the same."""
    add_probe_command(subparsers.add_parser("plugin", help=help))


def _is_ready(paths: PluginPaths) -> bool:
    # readiness.py writes the marker and logs (structlog): only `--ready` loads it, not the liveness probe
    from kubelet_plugin.serving.readiness import is_ready  # noqa: PLC0415

    return is_ready(paths.ready_file)


def run_from_args(args: argparse.Namespace) -> int:
    if args.timeout <= 0:
        sys.stderr.write(f"--timeout must be positive seconds, got {args.timeout}\n")
        return EXIT_UNHEALTHY
    paths = with_paths(DaemonOptions(node_name=""), args).paths()
    result = probe(paths, timeout=args.timeout)
    if result.healthy and args.ready and not _is_ready(paths):
        result = ProbeResult(
            False, f"not ready: not yet registered with the kubelet and published ({paths.ready_file})"
        )
    if not result.healthy:
        sys.stderr.write(f"unhealthy: {result.reason}\n")
        return EXIT_UNHEALTHY
    return EXIT_HEALTHY
