"""The real node daemon, started the way tests start it: `python -m tests.support.daemon [daemon flags]
[--claims-dir-source DIR]`.

On top of the daemon's own command line: claims read from a directory instead of the API server, and the
fault observer armed from `TESSERA_FAULT` / `TESSERA_FAULT_CLAIM` (tests/support/faults.py). Then the
daemon's own `serve` runs, as `tessera plugin` would.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from kubelet_plugin.daemon import add_arguments, options_from, serve
from tests.support.claim_files import directory_claims
from tests.support.faults import Faults


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="tests.support.daemon", description=__doc__)
    add_arguments(parser)
    parser.add_argument(
        "--claims-dir-source",
        type=Path,
        metavar="DIR",
        help="read ResourceClaims from <DIR>/<namespace>/<name>.json|yaml instead of the API server",
    )
    args = parser.parse_args(argv)
    options = options_from(args)
    try:
        faults = Faults.from_env()
    except ValueError as e:
        parser.error(str(e))
    claims = directory_claims(args.claims_dir_source) if args.claims_dir_source is not None else None
    return serve(options, steps=faults, claims=claims)


if __name__ == "__main__":
    sys.exit(main())
