"""The file a `tessera cleanup` instance writes once its node is clean: its readiness.

It lives in the instance's own container (`/run/tessera`), never on the host, so a new instance starts not
ready. The chart's cleanup DaemonSet's readinessProbe checks it (`test -e /run/tessera/cleanup-done`, or
`cleanup_done` from a probe command); with `--root` (tests) it is below the root.
"""

from __future__ import annotations

from pathlib import Path

from dra_driver.io.files import atomic_write
from dra_driver.io.safe_tree import is_plain_file, remove_tree

CLEANUP_DONE_FILE = Path("/run/tessera/cleanup-done")


def cleanup_done_file(root: Path | None = None) -> Path:
    """Where an instance started with this `--root` (None: none) says that its node is clean."""
    return root / CLEANUP_DONE_FILE.relative_to("/") if root is not None else CLEANUP_DONE_FILE


def cleanup_done(path: Path = CLEANUP_DONE_FILE) -> bool:
    """Whether the instance that writes `path` has cleaned its node (the readiness check)."""
    return is_plain_file(path)


def mark_clean(path: Path, *, removed: int) -> None:
    atomic_write(path, f"clean: {removed} thing(s) removed\n".encode(), mode=0o644, durable=False)


def clear(path: Path) -> None:
    """A starting instance is not ready until it has cleaned the node again."""
    remove_tree(path)
