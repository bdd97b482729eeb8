"""`python -m e2e.controlplane up|down|status --state-dir DIR`."""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

from dra_driver.io import logs
from e2e.controlplane import settings
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.launcher import start_control_plane, stop_control_plane
from e2e.controlplane.processes import is_alive
from e2e.controlplane.state import load_state


def _parser() -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(
        prog="python -m e2e.controlplane",
        description="A real Kubernetes control plane for Tessera's e2e tests and demo.",
    )
    verbs = parser.add_subparsers(dest="verb", required=True)
    up = verbs.add_parser("up", help="build if needed, start, and leave running")
    up.add_argument("--no-build", action="store_true", help="fail instead of building missing binaries")
    up.add_argument("--timeout", type=float, default=180.0, help="seconds to wait for each component")
    up.add_argument(
        "--client-rates",
        choices=sorted(settings.CLIENT_RATES),
        default=settings.UPSTREAM_DEFAULTS.name,
        help="kube-controller-manager's and kube-scheduler's client QPS/burst (e2e/controlplane/settings.py)",
    )
    verbs.add_parser("down", help="stop what `up` started in the state directory")
    verbs.add_parser("status", help="print the state as JSON")
    for sub in verbs.choices.values():
        sub.add_argument(
            "--state-dir", type=Path, required=True, help="where certs, etcd data, logs and state go"
        )
    return parser


def main(argv: list[str] | None = None) -> int:
    args = _parser().parse_args(argv)
    logs.configure()
    state_dir: Path = args.state_dir.resolve()
    try:
        if args.verb == "up":
            binaries = ensure_built(allow_build=not args.no_build)
            plane = start_control_plane(
                state_dir=state_dir,
                binaries=binaries,
                die_with_parent=False,
                timeout_s=args.timeout,
                client_rates=settings.client_rates(args.client_rates),
            )
            print(f"control plane up at {plane.server} (logs in {state_dir / 'logs'})")
            print(f"export KUBECONFIG={plane.kubeconfig}")
            print(f"{binaries.kubectl} get --raw /version")
            print(f"stop it with: python -m e2e.controlplane down --state-dir {state_dir}")
        elif args.verb == "down":
            stopped = stop_control_plane(state_dir)
            print(f"stopped {stopped} component(s)")
        else:
            state = load_state(state_dir)
            if state is None:
                print(json.dumps({"running": False}))
                return 1
            print(
                json.dumps(
                    {
                        "server": state.server,
                        "kubeconfig": state.kubeconfig,
                        "components": {
                            c.name: {"pid": c.pid, "alive": is_alive(c.pid), "log": c.log}
                            for c in state.components
                        },
                    },
                    indent=2,
                )
            )
    except ControlPlaneError as e:
        print(f"error: {e}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
