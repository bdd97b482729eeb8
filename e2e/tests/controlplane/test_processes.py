"""Component processes die with the process that started them, and `stop` never signals a reused pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import textwrap
import time
from pathlib import Path

from e2e.controlplane.processes import is_alive, spawn, stop_component, stop_record
from e2e.controlplane.state import ComponentRecord

SLEEP = Path("/bin/sleep")
REPO = Path(__file__).resolve().parents[3]


def wait_dead(pid: int, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if not is_alive(pid):
            return True
        time.sleep(0.05)
    return False


def test_component_dies_when_starter_is_killed(tmp_path: Path) -> None:
    starter = subprocess.Popen(
        [
            sys.executable,
            "-c",
            textwrap.dedent(f"""
            import pathlib, sys, time
            from dra_driver.io import logs
            logs.configure()  # log lines to stderr; stdout carries only the pid
            from e2e.controlplane.processes import spawn
            c = spawn(name="sleeper", binary=pathlib.Path("{SLEEP}"), args=["600"],
                      log_path=pathlib.Path("{tmp_path}/sleeper.log"), die_with_parent=True)
            print(c.process.pid, flush=True)
            time.sleep(600)
        """),
        ],
        cwd=REPO,
        stdout=subprocess.PIPE,
        text=True,
    )
    assert starter.stdout is not None
    child = int(starter.stdout.readline())
    assert is_alive(child)
    starter.kill()  # SIGKILL: no atexit, no cleanup code runs
    starter.wait()
    assert wait_dead(child), "component outlived the process that started it"


def test_detached_component_survives_and_stop_record_ends_its_group(tmp_path: Path) -> None:
    component = spawn(
        name="sleeper", binary=SLEEP, args=["600"], log_path=tmp_path / "s.log", die_with_parent=False
    )
    assert os.getpgid(component.process.pid) == component.process.pid, "not in its own process group"
    assert stop_record(component.record()) is True
    component.process.wait(timeout=5)
    assert component.process.returncode == -signal.SIGTERM


def test_stop_record_ignores_a_pid_running_something_else(tmp_path: Path) -> None:
    component = spawn(
        name="sleeper", binary=SLEEP, args=["600"], log_path=tmp_path / "s.log", die_with_parent=True
    )
    try:
        stale = ComponentRecord(name="etcd", pid=component.process.pid, binary="/nonexistent/etcd", log="x")
        assert stop_record(stale) is False
        assert is_alive(component.process.pid)
    finally:
        stop_component(component)
    assert not is_alive(component.process.pid)
