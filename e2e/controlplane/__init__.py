"""A real Kubernetes control plane (etcd, kube-apiserver, kube-controller-manager, kube-scheduler)
for e2e tests and the demo, run from binaries built by e2e/cluster/build.sh."""

from __future__ import annotations

from e2e.controlplane.errors import ControlPlaneError
from e2e.controlplane.launcher import ControlPlane, start_control_plane, stop_control_plane
from e2e.controlplane.nodes import create_node
from e2e.controlplane.settings import FEATURE_GATES, K8S_VERSION

__all__ = [
    "FEATURE_GATES",
    "K8S_VERSION",
    "ControlPlane",
    "ControlPlaneError",
    "create_node",
    "start_control_plane",
    "stop_control_plane",
]
