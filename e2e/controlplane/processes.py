"""Starting and stopping component processes, each in its own process group with its output in a log file."""

from __future__ import annotations

import contextlib
import ctypes
import os
import signal
import subprocess
import time
from dataclasses import dataclass
from pathlib import Path

import structlog

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.state import ComponentRecord

log = structlog.get_logger(__name__)

_PR_SET_PDEATHSIG = 1


def _die_with_parent() -> None:
    # Runs in the child between fork and exec: SIGKILL it when the parent dies, even by SIGKILL, so a crashed
    # test run leaves nothing behind.
    libc = ctypes.CDLL(None, use_errno=True)
    libc.prctl(_PR_SET_PDEATHSIG, signal.SIGKILL, 0, 0, 0)


@dataclass(frozen=True, slots=True)
class Component:
    name: str
    binary: Path
    log: Path
    process: subprocess.Popen[bytes]
    args: tuple[str, ...] = ()  # the command line after the binary, to start it again the same way

    def record(self) -> ComponentRecord:
        return ComponentRecord(
            name=self.name, pid=self.process.pid, binary=str(self.binary), log=str(self.log)
        )


def spawn(*, name: str, binary: Path, args: list[str], log_path: Path, die_with_parent: bool) -> Component:
    log_path.parent.mkdir(parents=True, exist_ok=True)
    with log_path.open("ab") as out:
        try:
            process = subprocess.Popen(
                [str(binary), *args],
                stdin=subprocess.DEVNULL,
                stdout=out,
                stderr=subprocess.STDOUT,
                start_new_session=True,
                preexec_fn=_die_with_parent if die_with_parent else None,  # noqa: PLW1509 - only prctl
            )
        except OSError as e:
            raise ControlPlaneError(
                f"cannot start {name} from {binary}: {e}; run e2e/cluster/build.sh"
            ) from e
    log.info("component.started", component=name, pid=process.pid, log=str(log_path))
    return Component(name=name, binary=binary, log=log_path, process=process, args=tuple(args))


def log_tail(path: Path, *, lines: int = 25) -> str:
    try:
        text = path.read_text(errors="replace")
    except FileNotFoundError:
        return "(no log)"
    return "\n".join(text.splitlines()[-lines:])


def is_alive(pid: int) -> bool:
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except (FileNotFoundError, ProcessLookupError):
        return False
    # A zombie has exited; its parent just has not reaped it yet.
    return stat.rsplit(")", 1)[1].split()[0] != "Z"


def _runs_binary(pid: int, binary: str) -> bool:
    """Guards against pid reuse: only signal a pid that still runs the binary we started."""
    try:
        argv0 = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0", 1)[0].decode(errors="replace")
    except (FileNotFoundError, ProcessLookupError, PermissionError):
        return False
    return argv0 == binary


def stop_record(record: ComponentRecord, *, grace_s: float = 10.0) -> bool:
    """Stops the component's process group: SIGTERM, then SIGKILL after `grace_s`. Returns whether it was
    running."""
    if not is_alive(record.pid) or not _runs_binary(record.pid, record.binary):
        return False
    try:
        os.killpg(record.pid, signal.SIGTERM)
    except ProcessLookupError:
        return False
    deadline = time.monotonic() + grace_s
    while is_alive(record.pid) and time.monotonic() < deadline:
        time.sleep(0.05)
    if is_alive(record.pid):
        log.warning("component.kill", component=record.name, pid=record.pid)
        with contextlib.suppress(ProcessLookupError):
            os.killpg(record.pid, signal.SIGKILL)
        while is_alive(record.pid):
            time.sleep(0.05)
    log.info("component.stopped", component=record.name, pid=record.pid)
    return True


def stop_component(component: Component, *, grace_s: float = 10.0) -> None:
    stop_record(component.record(), grace_s=grace_s)
    try:
        component.process.wait(timeout=5)
    except subprocess.TimeoutExpired as e:
        raise ControlPlaneError(f"{component.name} (pid {component.process.pid}) did not exit") from e
