"""Fixtures shared by the e2e tests that need the real control plane."""

import pytest

from e2e.controlplane.pytest_fixture import (
    control_plane,
    e2e_namespace,
    k8s_api,
    node_factory,
    skip_unmixable,
)

__all__ = ["control_plane", "e2e_namespace", "k8s_api", "node_factory"]


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    skip_unmixable(items)
