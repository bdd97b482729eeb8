"""`python -m e2e.kubelet_standin --node-name N --root DIR --kubeconfig FILE`: the kubelet of one simulated
node, until SIGTERM or SIGINT."""

from __future__ import annotations

import argparse
import signal
import sys
from pathlib import Path
from types import FrameType

import structlog
from kubernetes import config as k8s_config

from dra_driver.io.logs import configure
from e2e.kubelet_standin.apiserver import NodeApi
from e2e.kubelet_standin.errors import StandInError
from e2e.kubelet_standin.kubelet import KubeletStandIn, StandInOptions

log = structlog.get_logger(__name__)


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog="python -m e2e.kubelet_standin", description=__doc__)
    parser.add_argument("--node-name", required=True)
    parser.add_argument("--root", type=Path, required=True, help="the node's root (the plugin's --root)")
    parser.add_argument("--kubeconfig", type=Path, required=True, help="the node's credentials")
    parser.add_argument("--workers", type=int, default=2, help="pods synced at once")
    parser.add_argument(
        "--wipe-grace", type=float, default=30.0, help="seconds before a vanished driver's slices are deleted"
    )
    parser.add_argument("--log-format", choices=("json", "console"), default="json")
    parser.add_argument("--log-level", choices=("debug", "info", "warning", "error"), default="info")
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    configure(level=args.log_level, fmt="json" if args.log_format == "json" else "console")
    options = StandInOptions.under(
        args.root.resolve(), node_name=args.node_name, workers=args.workers, wipe_grace_s=args.wipe_grace
    )
    api_client = k8s_config.new_client_from_config(config_file=str(args.kubeconfig))  # type: ignore[no-untyped-call]
    standin = KubeletStandIn(options=options, api=NodeApi(api=api_client, node_name=args.node_name))

    def on_signal(signum: int, frame: FrameType | None) -> None:
        log.info("standin.stopping", signal=signal.Signals(signum).name)
        standin.request_stop()

    signal.signal(signal.SIGTERM, on_signal)
    signal.signal(signal.SIGINT, on_signal)
    try:
        standin.start()
    except StandInError as e:
        log.error("standin.cannot_start", error=str(e))
        return 1
    standin.wait()
    standin.stop()
    log.info("standin.stopped", node=args.node_name)
    return 0


if __name__ == "__main__":
    sys.exit(main())
