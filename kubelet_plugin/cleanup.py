"""`tessera cleanup`: remove what Tessera put on a node, once no claim is prepared there.

    tessera cleanup [plugin options]             serve until SIGTERM: refuse prepares, serve unprepares,
                                                 clean the node after the last, then be ready
    tessera cleanup --once [plugin options]      clean now and print what went, one per line; exit 1 and
                                                 name the claims still prepared, if any
    tessera cleanup --dry-run [plugin options]   print what would go; remove nothing

The options are `tessera plugin`'s. What goes: CDI specs of ours, claim directories, GPU views, MPS control
daemons and their directory, MIG instances Tessera created and MIG mode it switched on (never an
administrator's), the installed libtessera.so, the checkpoint, locks, stale sockets and ready files in the
plugin directory. docs/install.md, "Uninstalling".
"""

from __future__ import annotations

import argparse
import contextlib
import sys
from dataclasses import replace
from pathlib import Path
from typing import TYPE_CHECKING

import structlog

from dra_driver.io.logs import configure
from dra_driver.vocabulary.errors import ConfigError, StorageError, TesseraError
from kubelet_plugin.daemon import STOP_GRACE_S, add_arguments, options_from, stop_on_signals
from kubelet_plugin.node.file_modes import set_umask
from kubelet_plugin.node.sockets import PluginLock
from kubelet_plugin.removal.cleanup_marker import cleanup_done_file
from kubelet_plugin.removal.cleanup_plan import PendingClaim
from kubelet_plugin.serving.options import DaemonOptions

if TYPE_CHECKING:
    from kubelet_plugin.claims.prepare import Preparer
    from kubelet_plugin.removal.removal_record import RecordedState
    from kubelet_plugin.serving.node_setup import ClaimAccess, ClaimsFrom

EXIT_CLEAN, EXIT_PENDING, EXIT_FAILED = 0, 1, 2
log = structlog.get_logger(__name__)


def add_cli(subparsers: argparse._SubParsersAction[argparse.ArgumentParser]) -> None:
    """The `tessera cleanup` subcommand; `kubelet_plugin.command` adds it to `tessera`."""
    parser = subparsers.add_parser(
        "cleanup",
        help="remove what Tessera put on this node (serving the kubelet's unprepares until then)",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    add_arguments(parser)
    parser.add_argument(
        "--once",
        action="store_true",
        help="do not serve: clean the node now, or exit 1 naming the claims still prepared",
    )
    parser.add_argument(
        "--dry-run", action="store_true", help="print what --once would remove, and remove nothing"
    )
    parser.add_argument(
        "--done-file",
        type=Path,
        metavar="FILE",
        help="written once the node is clean, for a readiness probe (default: /run/tessera/cleanup-done, "
        "or below --root)",
    )
    parser.set_defaults(handler=run_from_args)


def run_from_args(args: argparse.Namespace, *, claims: ClaimsFrom | None = None) -> int:
    """`claims`: where claims are read (a test harness gives its own); default the API server."""
    options = replace(options_from(args), publish=False)
    configure(level=options.log_level, fmt="json" if options.log_format == "json" else "console")
    if args.once or args.dry_run:
        return once(options, dry_run=args.dry_run, claims=claims)
    from kubelet_plugin.serving.node_setup import claim_access  # noqa: PLC0415 - keeps `--help` fast

    done_file = args.done_file or cleanup_done_file(options.root)
    return serve(options, claims=claims or claim_access, done_file=done_file)


def _refusal(*, pending: tuple[PendingClaim, ...], serving: tuple[str, ...]) -> str:
    """Why nothing was removed, and what to do (stderr)."""
    out = ""
    if serving:
        out += (
            f"tessera cleanup: a Tessera node plugin still serves this node ({', '.join(serving)}): "
            "uninstall it first (helm uninstall), then clean the node.\n"
        )
    if pending:
        listed = "\n".join(f"  {c}" for c in pending)
        out += (
            f"tessera cleanup: {len(pending)} claim(s) are still prepared on this node:\n{listed}\n"
            "Delete their pods first (the kubelet then unprepares their claims), or run `tessera cleanup` "
            "without --once (the chart's cleanup.enabled=true): it serves those unprepares and cleans the "
            "node after the last.\n"
        )
    return out


def _access(options: DaemonOptions, claims: ClaimsFrom | None) -> ClaimAccess:
    from kubelet_plugin.removal.cleanup_node import offline_access  # noqa: PLC0415 - keeps `--help` fast
    from kubelet_plugin.serving.node_setup import claim_access  # noqa: PLC0415

    if claims is not None:
        return claims(options)
    try:
        return claim_access(options)
    except ConfigError as e:
        log.info("no API server: whether prepared claims still exist is not asked", reason=str(e))
        return offline_access(options)


def once(options: DaemonOptions, *, dry_run: bool, claims: ClaimsFrom | None = None) -> int:
    from kubelet_plugin.removal.cleanup_node import open_node  # noqa: PLC0415 - keeps `--help` fast

    node = open_node(options, access=_access(options, claims))
    try:
        return _dry_run(node.state) if dry_run else _clean(node.preparer)
    finally:
        node.close()


def _dry_run(state: RecordedState) -> int:
    from kubelet_plugin.removal.node_sweep import planned  # noqa: PLC0415

    try:
        plan = planned(state)
    except StorageError as e:
        raise StorageError(f"{e}; a run without --dry-run rebuilds it from the node first") from e
    if plan.blocked:
        sys.stderr.write(_refusal(pending=plan.pending, serving=plan.serving))
        return EXIT_PENDING
    sys.stdout.writelines(f"{item}\n" for item in plan.leftovers)
    sys.stderr.writelines(f"kept: {k}\n" for k in plan.kept)
    sys.stderr.write("dry run: nothing was removed\n" if plan.leftovers else "nothing to remove\n")
    return EXIT_CLEAN


def _clean(preparer: Preparer) -> int:
    from kubelet_plugin.removal.cleanup_node import settle_claims  # noqa: PLC0415
    from kubelet_plugin.removal.node_sweep import sweep  # noqa: PLC0415
    from kubelet_plugin.removal.removal_record import RecordedState, distinct  # noqa: PLC0415

    state = preparer.state
    assert isinstance(state, RecordedState)
    paths = state.paths
    set_umask()
    lock = PluginLock(paths.lock_file)
    settle_claims(preparer, lock)
    held = lock.held() if paths.plugin_dir.is_dir() else contextlib.nullcontext()
    with held:
        outcome = sweep(preparer)
    if outcome.pending or outcome.serving:
        sys.stderr.write(_refusal(pending=outcome.pending, serving=outcome.serving))
        return EXIT_PENDING
    removed = distinct([*state.went, *outcome.removed])
    sys.stdout.writelines(f"{line}\n" for line in removed)
    sys.stderr.writelines(f"kept: {k}\n" for k in outcome.kept)
    sys.stderr.writelines(f"not removed: {p}\n" for p in outcome.problems)
    if not outcome.clean:
        return EXIT_FAILED
    if not removed:
        sys.stderr.write("nothing to remove: this node holds nothing of Tessera's\n")
    log.info("node clean", node=preparer.pool_name, removed=removed, kept=list(outcome.kept))
    return EXIT_CLEAN


def serve(options: DaemonOptions, *, claims: ClaimsFrom, done_file: Path) -> int:
    """Run until SIGTERM/SIGINT; 1 when the instance cannot start."""
    from kubelet_plugin.removal.cleanup_node import CleanupNode  # noqa: PLC0415

    set_umask()
    stop = stop_on_signals()
    try:
        node = CleanupNode.start(options, claims=claims, done_file=done_file)
    except TesseraError as e:
        log.error("the cleanup instance cannot run", error=str(e))
        return 1
    try:
        node.run_until(stop)
    finally:
        node.stop(grace=STOP_GRACE_S)
    log.info("stopped")
    return 0
