"""`python -m e2e.demo up|down [--state-dir DIR] [--nvml fake] [--smoke]` (default state dir: .state/demo in
the repository; `--nvml fake`: the node plugins on the NVML backend over the fake libnvidia-ml; `--smoke`:
one example, deploy/examples/03-vgpu.yaml, instead of all of them: `make demo SMOKE=1`, which `make test`
runs)."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from dra_driver.io.logs import configure
from dra_driver.vocabulary.errors import TesseraError
from e2e.demo.session import down, up
from e2e.harness.node import BackendKind

DEFAULT_STATE_DIR = Path(__file__).resolve().parent.parent.parent / ".state" / "demo"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.demo", description=__doc__)
    parser.add_argument("verb", choices=("up", "down"))
    parser.add_argument("--state-dir", type=Path, default=DEFAULT_STATE_DIR)
    parser.add_argument(
        "--nvml",
        choices=("fake",),
        help="run the node plugins on the NVML backend over the fake libnvidia-ml (interceptor/build/fake)",
    )
    parser.add_argument("--smoke", action="store_true", help="up: one example instead of all (make test)")
    args = parser.parse_args(argv)
    configure(level="warning")
    backend = BackendKind.NVML if args.nvml else BackendKind.SIMULATED
    try:
        if args.verb == "up":
            return up(args.state_dir, backend=backend, smoke=args.smoke)
        return down(args.state_dir)
    except TesseraError as e:
        print(f"error: {e}", file=sys.stderr)
        if args.verb == "up":
            print("stop what was started with: make demo-down", file=sys.stderr)
        return 1


if __name__ == "__main__":
    sys.exit(main())
