"""What the node daemon cannot settle alone reaches the cluster: a Warning Event on its Node when its
checkpoint was unreadable and rebuilt, and when one of a newer version stops it from starting."""

from __future__ import annotations

import json
import shutil
import tempfile
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s

from dra_driver.vocabulary.errors import UnsupportedVersionError
from e2e.controlplane.launcher import ControlPlane
from kubelet_plugin.node.events import CHECKPOINT_NEWER_REASON, CHECKPOINT_REBUILT_REASON, EVENT_NAMESPACE
from kubelet_plugin.node.paths import PluginPaths
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.plugin_instance import Node
from tests.support.claim_files import directory_claims

pytestmark = pytest.mark.e2e
NODE_FILE = Path(__file__).resolve().parents[3] / "e2e" / "nodes" / "h100x8.yaml"


@pytest.fixture
def root() -> Iterator[Path]:
    path = Path(tempfile.mkdtemp(prefix="tse-", dir="/tmp"))  # short: unix socket paths
    (path / "claims").mkdir()
    yield path
    shutil.rmtree(path, ignore_errors=True)


@pytest.fixture
def node(node_factory: Any) -> str:
    name = f"ckpt-{uuid.uuid4().hex[:8]}"
    node_factory(name)
    return name


def options(root: Path, node: str, plane: ControlPlane) -> DaemonOptions:
    return DaemonOptions(
        node_name=node,
        root=root,
        simulate=NODE_FILE,
        sim_state=root / "sim-state.json",
        kubeconfig=plane.kubeconfig,
        health_interval=60.0,
        publish=False,
        log_level="warning",
    )


def node_events(api: k8s.ApiClient, node: str, reason: str) -> list[k8s.CoreV1Event]:
    listed = k8s.CoreV1Api(api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={node},reason={reason}"
    )
    return list(listed.items or [])


def test_a_rebuilt_checkpoint_is_reported_on_the_node(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, root: Path, node: str
) -> None:
    checkpoint = PluginPaths.under(root).checkpoint_file
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_bytes(b"\x00garbage")
    plugin = Node.start(options(root, node, control_plane), claims=directory_claims(root / "claims"))
    plugin.stop(grace=0)
    (event,) = node_events(k8s_api, node, CHECKPOINT_REBUILT_REASON)
    assert event.type == "Warning" and event.involved_object.kind == "Node"
    message = event.message or ""
    assert "could not be read" in message and "checkpoint.json.unreadable-" in message


def test_a_newer_checkpoint_stops_start_up_and_is_reported(
    control_plane: ControlPlane, k8s_api: k8s.ApiClient, root: Path, node: str
) -> None:
    checkpoint = PluginPaths.under(root).checkpoint_file
    checkpoint.parent.mkdir(parents=True)
    checkpoint.write_text(json.dumps({"apiVersion": "checkpoint.tessera.dev/v9", "kind": "Checkpoint"}))
    with pytest.raises(UnsupportedVersionError):
        Node.start(options(root, node, control_plane), claims=directory_claims(root / "claims"))
    (event,) = node_events(k8s_api, node, CHECKPOINT_NEWER_REASON)
    assert event.type == "Warning" and "checkpoint.tessera.dev/v9" in (event.message or "")
    assert json.loads(checkpoint.read_text())["apiVersion"] == "checkpoint.tessera.dev/v9"
