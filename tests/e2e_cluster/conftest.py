"""Fixtures shared by the e2e tests that need the real control plane."""

from e2e.controlplane.pytest_fixture import control_plane, e2e_namespace, k8s_api, node_factory

__all__ = ["control_plane", "e2e_namespace", "k8s_api", "node_factory"]
