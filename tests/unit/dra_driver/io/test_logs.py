"""Logging, as configured once per process: every line on stderr, whatever stderr is when the line is
written; stdout is left to a command's data. Each test is a fresh interpreter (configuration is
process-wide)."""

from __future__ import annotations

import subprocess
import sys
import textwrap
from pathlib import Path

REPO = Path(__file__).resolve().parents[4]


def run(code: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(code)],
        cwd=REPO,
        capture_output=True,
        text=True,
        timeout=60,
        check=True,
    )


def test_configured_lines_go_to_stderr_and_stdout_keeps_the_data() -> None:
    done = run("""
        import structlog
        from dra_driver.io import logs
        logs.configure(level="info", fmt="json")
        structlog.get_logger().warning("disk.slow", path="/x")
        print("data")
    """)
    assert done.stdout == "data\n"
    assert '"event": "disk.slow"' in done.stderr and '"level": "warning"' in done.stderr


def test_a_stderr_replaced_after_configuring_gets_the_lines() -> None:
    """A redirect (or a test's capture) set up after logging was configured still receives its lines."""
    done = run("""
        import contextlib, io, structlog
        from dra_driver.io import logs
        logs.configure()
        buffer = io.StringIO()
        with contextlib.redirect_stderr(buffer):
            structlog.get_logger().info("inside")
        structlog.get_logger().info("outside")
        print(buffer.getvalue().strip())
    """)
    assert "inside" in done.stdout and "outside" not in done.stdout
    assert "outside" in done.stderr and "inside" not in done.stderr


def test_the_first_configuration_wins_and_filters_by_level() -> None:
    done = run("""
        import structlog
        from dra_driver.io import logs
        logs.configure(level="warning")
        logs.configure(level="debug")  # a second call changes nothing
        log = structlog.get_logger()
        log.info("quiet")
        log.warning("loud")
    """)
    assert "loud" in done.stderr and "quiet" not in done.stderr
    assert done.stdout == ""
