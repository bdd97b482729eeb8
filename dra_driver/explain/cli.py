"""`tessera explain CLAIM`: can a claim be allocated on a node, and why not.

Exit 0 yes, 1 no, 2 bad input or cannot decide (a selector uses CEL that explain cannot evaluate).
A simulated node (`--simulate` with a SimulatedNode) publishes with the settings given by `--settings`
(docs/scheduling.md); ResourceSlices, listed or a cluster's, are read as published.

Only the argument parser lives here; the CEL machinery is imported when the command runs, so other
`tessera` commands (the liveness probe among them) do not pay for it.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any


def add_cli(subparsers: Any) -> None:
    """Register `explain` on the `tessera` command's subparsers; the handler is in `handler`."""
    p = subparsers.add_parser(
        "explain",
        help="explain why a ResourceClaim can or cannot be allocated on a node",
        description="Evaluate a claim against one node's ResourceSlices like kube-scheduler does. "
        "Exit code 0: it fits; 1: it does not; 2: bad input, or a selector uses a CEL feature "
        "explain cannot evaluate (optional types).",
    )
    p.add_argument(
        "claim", help="a ResourceClaim/ResourceClaimTemplate YAML file, or namespace/name in the cluster"
    )
    where = p.add_mutually_exclusive_group()
    where.add_argument(
        "--simulate",
        type=Path,
        action="append",
        metavar="NODEFILE",
        help="YAML with ResourceSlices (and allocated claims, DeviceClasses) or a SimulatedNode; repeatable",
    )
    where.add_argument("--node", help="node name in the cluster whose slices to read")
    p.add_argument(
        "--settings",
        type=Path,
        metavar="FILE",
        help="the simulated nodes' settings (resource.tessera.dev/v1 NodeSettings, as `tessera inventory "
        "--settings` takes them: a node group's sharesPerGpu, migProfiles, families); default: every default",
    )
    p.add_argument(
        "--kubeconfig", help="kubeconfig for cluster mode (default: in-cluster, then ~/.kube/config)"
    )
    p.add_argument(
        "--classes",
        type=Path,
        action="append",
        metavar="PATH",
        help="DeviceClass YAML file or directory (with --simulate; default: the repo's deviceclasses/)",
    )
    p.add_argument("--output", choices=("text", "json"), default="text")
    p.add_argument("--verbose", action="store_true", help="also list devices other DeviceClasses select")
    p.set_defaults(handler=_run)


def _run(args: argparse.Namespace) -> int:
    from dra_driver.explain.command import run  # noqa: PLC0415 - deferred on purpose, see the module doc

    return run(args)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tessera")
    add_cli(parser.add_subparsers(dest="command", required=True))
    args = parser.parse_args(argv)
    code: int = args.handler(args)
    return code


if __name__ == "__main__":
    raise SystemExit(main())
