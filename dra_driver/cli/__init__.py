"""The `tessera` command's parser and dispatch: the device model's subcommands (`inventory`, `explain`,
`gpu`, `sim`); the layers above add theirs (`kubelet_plugin.command`, the `tessera` entry point: this layer
never imports the daemon).

    tessera inventory [--simulate NODE.yaml] [--state-file FILE] [--settings FILE] [--node-name NAME]
                      [-o summary|yaml|json]
    tessera sim inject --node-file NODE.yaml --state-file FILE --gpu I (--xid N | --lost | ... | --clear)
    tessera gpu cordon|drain|uncordon NODE GPU [--wait SECONDS]; tessera gpu list [NODE]
    tessera explain CLAIM [--simulate NODEFILE | --node NODE]

Light on purpose: every `tessera` process (the daemons, the liveness probe, a user's `kubectl tessera`)
starts here, so this module imports only argparse. The subcommands are a table of names and help lines; a
subcommand's module is imported, and its arguments added, only when it is the one that runs.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass

Handler = Callable[[argparse.Namespace], int]
AddCommand = Callable[["argparse._SubParsersAction[argparse.ArgumentParser]"], None]


@dataclass(frozen=True, slots=True)
class Subcommand:
    """A `tessera` subcommand as `tessera --help` lists it. `add` imports the subcommand's module and adds
    its parser (same name and help) to the subparsers it is given."""

    name: str
    help: str
    add: AddCommand


def _add_inventory(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from dra_driver.cli.inventory import add_cli

    add_cli(sub)


def _add_explain(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from dra_driver.explain.cli import add_cli

    add_cli(sub)


def _add_gpu(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from dra_driver.admin.gpu_cordon import add_cli

    add_cli(sub)


def _add_sim(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from dra_driver.backends.sim_inject import add_cli

    add_cli(sub)


INVENTORY = Subcommand("inventory", "print the ResourceSlices this node would publish", _add_inventory)
# after the layers' own, in this order: `tessera --help` lists them so
LAST = (
    Subcommand("explain", "explain why a ResourceClaim can or cannot be allocated on a node", _add_explain),
    Subcommand("gpu", "cordon, drain or uncordon one GPU of a node", _add_gpu),
    Subcommand("sim", "act on a simulated node", _add_sim),
)


def subcommands(extra: Sequence[Subcommand] = ()) -> tuple[Subcommand, ...]:
    """Every subcommand in the order `tessera --help` lists them; `extra`: the layers above's."""
    return (INVENTORY, *extra, *LAST)


def build_parser(extra: Sequence[Subcommand] = (), *, only: str | None = None) -> argparse.ArgumentParser:
    """Every subcommand's whole parser, or with `only` that one's alone and the others as their name and help
    (all that `tessera --help` and a usage error show of them)."""
    parser = argparse.ArgumentParser(prog="tessera", description="Tessera: a DRA driver for NVIDIA GPUs")
    sub = parser.add_subparsers(dest="command", required=True)
    for command in subcommands(extra):
        if only is None or command.name == only:
            command.add(sub)
        else:
            sub.add_parser(command.name, help=command.help)
    return parser


def main(
    argv: Sequence[str] | None = None,
    *,
    extra: Sequence[Subcommand] = (),
    defaults: dict[str, object] | None = None,
) -> int:
    """`defaults`: values the layers above hand every subcommand (`workload_claims` for `explain`)."""
    given = list(sys.argv[1:] if argv is None else argv)
    # the subcommand is the first word: the top level takes no option but --help
    parser = build_parser(extra, only=given[0] if given else "")
    parser.set_defaults(**(defaults or {}))
    args = parser.parse_args(given)
    from dra_driver.vocabulary.errors import TesseraError

    # Before any subcommand runs: its log lines go to stderr, its data alone to stdout. The daemons' own
    # --log-level/--log-format apply; the other subcommands log at info, readable. One that logs nothing
    # says `logs=False` and skips structlog (the liveness probe, every 30 s on every node).
    if getattr(args, "logs", True):
        from dra_driver.io.logs import configure

        configure(level=getattr(args, "log_level", "info"), fmt=getattr(args, "log_format", "console"))
    handler: Handler = args.handler
    try:
        return handler(args)
    except TesseraError as e:
        sys.stderr.write(f"tessera {args.command}: {e}\n")
        return 2
