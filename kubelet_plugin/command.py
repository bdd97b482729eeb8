"""The `tessera` command on top of both packages: the device model's subcommands (`inventory`, `explain`,
`gpu`, `sim`: dra_driver.cli), the node daemon's (`plugin`: kubelet_plugin.daemon, `cleanup`:
kubelet_plugin.cleanup) and the admission webhook's (`convert`, `webhook`: admission.cli).

    tessera plugin --node-name N [...]        python -m kubelet_plugin.command plugin ...

Every `tessera` process starts here (the daemon, its liveness probe, the webhook, a user's `kubectl
tessera`), so it imports only the light table of dra_driver.cli: a subcommand's module is imported when that
subcommand runs (tests/unit/kubelet_plugin/test_command.py holds it to that). `tessera plugin probe`, the
liveness probe every node runs every 30 s, loads the probe's module alone, not the daemon's.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path
from typing import Any

from dra_driver import cli


def _add_plugin(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kubelet_plugin import daemon

    daemon.add_cli(sub)


def _add_plugin_probe(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kubelet_plugin.serving import probe

    probe.add_plugin_with_probe_alone(sub, help=PLUGIN_HELP)


def _add_cleanup(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from kubelet_plugin import cleanup

    cleanup.add_cli(sub)


def _add_convert(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from admission import cli as admission_cli

    admission_cli.add_convert_cli(sub)


def _add_webhook(sub: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    from admission import cli as admission_cli

    admission_cli.add_webhook_cli(sub)


PLUGIN_HELP = "run the kubelet plugin (node daemon)"
COMMANDS: tuple[cli.Subcommand, ...] = (
    cli.Subcommand("plugin", PLUGIN_HELP, _add_plugin),
    cli.Subcommand(
        "cleanup",
        "remove what Tessera put on this node (serving the kubelet's unprepares until then)",
        _add_cleanup,
    ),
    cli.Subcommand(
        "convert",
        "print HAMi/Volcano workloads and NVIDIA DRA claims as they run on Tessera (templates first)",
        _add_convert,
    ),
    cli.Subcommand(
        "webhook",
        "serve the admission webhook that turns HAMi/Volcano GPU requests into claims",
        _add_webhook,
    ),
)


# `tessera plugin probe ...`: the same table, with `plugin` holding its probe alone
PROBE = ("plugin", "probe")
PROBE_COMMANDS = tuple(replace(c, add=_add_plugin_probe) if c.name == "plugin" else c for c in COMMANDS)


def _workload_claims(path: Path) -> list[tuple[str, dict[str, Any]]]:
    """`tessera explain FILE` also takes Pods and workloads: the claims the webhook would give them (the
    conversion loads when explain asks)."""
    from admission import cli as admission_cli

    return admission_cli.workload_claims(path)


def build_parser() -> argparse.ArgumentParser:
    """Every subcommand's whole parser."""
    return cli.build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    given = list(sys.argv[1:] if argv is None else argv)
    # `plugin`'s parser takes no positional, so a second word `probe` is always the probe
    commands = PROBE_COMMANDS if tuple(given[:2]) == PROBE else COMMANDS
    return cli.main(given, extra=commands, defaults={"workload_claims": _workload_claims})


if __name__ == "__main__":
    sys.exit(main())
