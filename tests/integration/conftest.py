"""Fixtures the integration tests share: a short root (unix socket paths must fit 107 bytes) and a node
daemon on it with the simulated backend."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

import pytest

from tests.support.plugin_process import PluginProcess, cleanup, short_root


@pytest.fixture
def root() -> Iterator[Path]:
    path = short_root()
    yield path
    cleanup([], path)


@pytest.fixture
def plugin(root: Path) -> Iterator[PluginProcess]:
    p = PluginProcess(root=root).start()
    yield p
    p.kill()
