"""The `tessera` command on top of both packages: the device model's subcommands (`inventory`, `explain`,
`sim`: dra_driver.cli), the node daemon's (`plugin`: kubelet_plugin.daemon, `cleanup`:
kubelet_plugin.cleanup) and the admission webhook's (`convert`: admission.convert_cli, `webhook`:
admission.command).

    tessera plugin --node-name N [...]        python -m kubelet_plugin.command plugin ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from admission import command as admission_command
from admission import convert_cli
from dra_driver import cli
from kubelet_plugin import cleanup, daemon

COMMANDS: tuple[cli.AddCommand, ...] = (
    daemon.add_cli,
    cleanup.add_cli,
    convert_cli.add_cli,
    admission_command.add_cli,
)


def build_parser() -> argparse.ArgumentParser:
    return cli.build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    # `tessera explain FILE` also takes Pods and workloads: the claims the webhook would give them
    return cli.main(argv, extra=COMMANDS, defaults={"workload_claims": convert_cli.workload_claims})


if __name__ == "__main__":
    sys.exit(main())
