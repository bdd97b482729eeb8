"""`python -m tests.support.noisy_command ARGS…`: `tessera ARGS…` (kubelet_plugin.command.main, as the
console script runs it), with one warning logged as the subcommand's handler starts.

For the subcommands that log nothing of their own on a test's input (`explain`, `convert`): whatever a
library they call may log one day must land on stderr, never among the data on stdout
(tests/integration/test_command_streams.py). The line is logged the way every module of Tessera logs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from typing import Any

import structlog

from kubelet_plugin import command

EVENT = "test.forced_warning"


def _with_warning(handler: Any) -> Any:
    def logged(args: argparse.Namespace) -> Any:
        structlog.get_logger("tests.support.noisy_command").warning(EVENT, command=args.command)
        return handler(args)

    return logged


def main(argv: Sequence[str] | None = None) -> int:
    parse_args = argparse.ArgumentParser.parse_args

    def noisy(self: argparse.ArgumentParser, args: Any = None, namespace: Any = None) -> Any:
        parsed = parse_args(self, args, namespace)
        if getattr(parsed, "handler", None) is not None:
            parsed.handler = _with_warning(parsed.handler)
        return parsed

    argparse.ArgumentParser.parse_args = noisy  # type: ignore[method-assign]
    return command.main(sys.argv[1:] if argv is None else argv)


if __name__ == "__main__":
    sys.exit(main())
