"""Smoke forms of the commands the documentation names (tests/README.md, "Smoke forms").

A test that runs a documented command says so with `covers("make bench-prepare", "tessera convert --summary")`
(the marker `covers`); tests/unit/test_documented_commands.py reads those markers from the test sources and
fails when a command the README, docs/ or a folder's README names has none. `make_smoke` runs a make target
the way a user does, in its smoke form (`SMOKE=1`), without remaking the prerequisites `make test` has just
made (`-o`), and returns what it printed.
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parents[2]
# What `make test` makes before it runs the tests: a smoke run does not make it again (-o, "old file").
MADE_BY_MAKE_TEST = ("dev", "interceptor", "cluster", "realnode", "helm", "image")


def covers(*commands: str) -> pytest.MarkDecorator:
    """Marks a test as the smoke form of these documented commands (as the docs spell them, flags included:
    `tessera plugin probe --ready`)."""
    return pytest.mark.covers(*commands)


def make_env(extra: dict[str, str] | None = None) -> dict[str, str]:
    """This environment without the outer make's (a `make test` running pytest), so the inner make starts
    afresh: no jobserver, no flags, no level."""
    env = {
        k: v for k, v in os.environ.items() if k not in ("MAKEFLAGS", "MFLAGS", "MAKELEVEL", "MAKEOVERRIDES")
    }
    env.update(extra or {})
    return env


def make_smoke(
    target: str, *variables: str, timeout: float, env: dict[str, str] | None = None
) -> subprocess.CompletedProcess[str]:
    """`make TARGET SMOKE=1 VARIABLES…` in the repository, the prerequisites `make test` made left alone."""
    old = [flag for name in MADE_BY_MAKE_TEST for flag in ("-o", name)]
    return subprocess.run(
        ["make", "--no-print-directory", *old, target, "SMOKE=1", *variables],
        cwd=REPO,
        env=make_env(env),
        capture_output=True,
        text=True,
        timeout=timeout,
        check=False,
    )


def lines_with(text: str, *needles: str) -> list[str]:
    """The needles that no line of `text` contains (empty: every one was printed)."""
    lines = text.splitlines()
    return [n for n in needles if not any(n in line for line in lines)]
