"""`tessera cleanup` started the way tests start it: `python -m tests.support.cleanup_daemon [cleanup flags]
[--claims-dir-source DIR]`: claims read from a directory instead of the API server, then the command's own
`run_from_args`, as `tessera cleanup` would."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from kubelet_plugin.cleanup import add_cli, run_from_args
from tests.support.claim_files import directory_claims


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.support.cleanup_daemon", description=__doc__)
    commands = parser.add_subparsers(dest="command", required=True)
    add_cli(commands)
    commands.choices["cleanup"].add_argument(
        "--claims-dir-source",
        type=Path,
        metavar="DIR",
        help="read ResourceClaims from <DIR>/<namespace>/<name>.json|yaml instead of the API server",
    )
    args = parser.parse_args(["cleanup", *(sys.argv[1:] if argv is None else argv)])
    source = args.claims_dir_source
    return run_from_args(args, claims=directory_claims(source) if source is not None else None)


if __name__ == "__main__":
    sys.exit(main())
