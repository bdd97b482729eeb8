"""A process the node daemon started in a session of its own (a GPU's MPS control daemon) and finds again
by pid, perhaps after a restart: whether it is still that process, waiting for its end, ending it.

A pid from a file may have been reused by another process since: a process counts as ours only when its
environment holds the entry we started it with (or, where the environment cannot be read, its name matches).
The node daemon may be a dead process's parent (PID 1 of its container adopts orphans): zombies are reaped.
"""

from __future__ import annotations

import contextlib
import os
import signal
import time
from pathlib import Path


def _state(pid: int) -> str | None:
    """The kernel's one-letter state of `pid` (Z: exited, not reaped), None when there is no such process."""
    try:
        return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0]
    except (OSError, IndexError):
        return None


def _reap(pid: int) -> None:
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def is_live_process(pid: int, *, env_entry: str, comm: str) -> bool:
    """Whether `pid` runs and is the process started with `env_entry` ("NAME=value") in its environment."""
    state = _state(pid)
    if state is None or state == "Z":
        _reap(pid)
        return False
    proc = Path("/proc") / str(pid)
    try:
        return os.fsencode(env_entry) in (proc / "environ").read_bytes().split(b"\0")
    except OSError:
        try:
            return (proc / "comm").read_text().strip() == comm
        except OSError:
            return False


def wait_gone(pid: int, seconds: float) -> bool:
    """Whether `pid` has exited (a zombie counts) within `seconds`."""
    deadline = time.monotonic() + seconds
    while True:
        state = _state(pid)
        if state is None or state == "Z":
            _reap(pid)
            return True
        if time.monotonic() > deadline:
            return False
        time.sleep(0.02)


def end_process(pid: int) -> bool:
    """SIGTERM, then SIGKILL, to `pid` and its process group when it leads one (its children, an MPS
    daemon's servers, go with it; never our own group). Whether it is gone."""
    for sig, wait in ((signal.SIGTERM, 1.0), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            group = os.getpgid(pid)
            if group == pid and group != os.getpgrp():
                os.killpg(group, sig)
            else:
                os.kill(pid, sig)
        if wait_gone(pid, wait):
            return True
    return False
