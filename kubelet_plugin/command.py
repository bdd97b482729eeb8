"""The `tessera` command on top of both packages: the device model's subcommands (`inventory`, `explain`,
`sim`: dra_driver.cli), the node daemon's (`plugin`: kubelet_plugin.daemon, `cleanup`:
kubelet_plugin.cleanup) and the admission webhook's (`convert`, `webhook`:
admission.cli).

    tessera plugin --node-name N [...]        python -m kubelet_plugin.command plugin ...
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from admission import cli as admission_cli
from dra_driver import cli
from kubelet_plugin import cleanup, daemon

COMMANDS: tuple[cli.AddCommand, ...] = (
    daemon.add_cli,
    cleanup.add_cli,
    admission_cli.add_convert_cli,
    admission_cli.add_webhook_cli,
)


def build_parser() -> argparse.ArgumentParser:
    return cli.build_parser(COMMANDS)


def main(argv: Sequence[str] | None = None) -> int:
    # `tessera explain FILE` also takes Pods and workloads: the claims the webhook would give them
    return cli.main(argv, extra=COMMANDS, defaults={"workload_claims": admission_cli.workload_claims})


if __name__ == "__main__":
    sys.exit(main())
