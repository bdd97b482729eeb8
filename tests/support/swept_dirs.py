"""A directory's entries once the daemon's background sweeper (kubelet_plugin/claims/tree_sweeper.py) has
removed the trees set aside there: removal renames a claim's tree to a temp name and returns, so a test that
looks right after the call must wait for the sweep, bounded, before it asserts nothing is left."""

from __future__ import annotations

import time
from pathlib import Path

from dra_driver.io.files import is_temp


def swept_names(directory: Path, *, timeout_s: float = 10.0) -> list[str]:
    """The sorted entry names of `directory` ([] when it does not exist) once none is a temp name, or as they
    stand after `timeout_s`."""
    end = time.monotonic() + timeout_s
    while True:
        names = sorted(p.name for p in directory.iterdir()) if directory.exists() else []
        if not any(is_temp(n) for n in names) or time.monotonic() > end:
            return names
        time.sleep(0.01)
