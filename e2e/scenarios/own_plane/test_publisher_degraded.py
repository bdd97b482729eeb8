"""The publisher against a real Kubernetes release whose default gates do not serve shared counters,
consumable capacity or device taints (1.34 and 1.35: the gates are alpha and off there).

Such a server silently drops the fields those gates guard (`sharedCounters`, `consumesCounters`,
`allowMultipleAllocations`, capacity `requestPolicy`). The publisher must notice on read-back, say so in
its log and in a Warning Event on the Node, and fall back to whole GPUs without counters. A second,
module-scoped control plane of that release (`LEGACY`: the session's own release when it lacks them, else the
newest that does) provides that server. Device taints the server drops make the publisher withdraw an
unhealthy GPU's devices instead.
"""

from __future__ import annotations

import shutil
import tempfile
import threading
import time
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from structlog.testing import capture_logs

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.inventory import FaultKind, GpuFault
from dra_driver.vocabulary.names import DRIVER_NAME
from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.nodes import create_node, delete_node
from e2e.controlplane.pytest_fixture import private_control_plane
from e2e.controlplane.releases import legacy_release
from kubelet_plugin.node.events import EVENT_NAMESPACE, NodeEvents
from kubelet_plugin.publish.publisher import (
    DEGRADED_REASON,
    TAINTS_DROPPED_REASON,
    SlicePublisher,
    with_probe_taint,
)
from kubelet_plugin.serving.options import DaemonOptions
from kubelet_plugin.serving.plugin_instance import Node
from tests.support.claim_files import directory_claims

pytestmark = pytest.mark.e2e
NODE_FILE = Path(__file__).resolve().parents[3] / "e2e" / "nodes" / "h100x8.yaml"
LEGACY = legacy_release()
WHOLE_GPUS = [f"gpu-{i}" for i in range(8)]


@pytest.fixture(scope="module")
def gates_off_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    with private_control_plane(
        tmp_path_factory.mktemp("controlplane-legacy"), release=LEGACY, gate_profile="default"
    ) as plane:
        yield plane


@pytest.fixture(scope="module")
def api(gates_off_plane: ControlPlane) -> Iterator[k8s.ApiClient]:
    with gates_off_plane.api_client() as client:
        yield client


@pytest.fixture
def node(api: k8s.ApiClient) -> Iterator[str]:
    name = f"degr-{uuid.uuid4().hex[:8]}"
    create_node(api, name=name)
    try:
        yield name
    finally:
        delete_node(api, name=name)


def slices_for(
    node: str, *, degraded: bool = False, sick: int | None = None, taints_supported: bool = True
) -> list[dict[str, Any]]:
    backend = SimulatedBackend.from_file(node_file=NODE_FILE, state_file=None)
    if sick is not None:
        backend.inject_fault(gpu=backend.gpu_by_index(sick).uuid, fault=GpuFault(FaultKind.LOST))
    return build_slices(
        backend.inventory(),
        NodeSettings(node_name=node),
        degraded=degraded,
        taints_supported=taints_supported,
    )


def stored_pool(api: k8s.ApiClient, node: str) -> list[dict[str, Any]]:
    """The pool as wire dicts: a field the server dropped cannot be filled in by a model default."""
    listed = k8s.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node},spec.driver={DRIVER_NAME}"
    )
    items: list[dict[str, Any]] = api.sanitize_for_serialization(listed.items or [])  # type: ignore[no-untyped-call]
    return sorted(items, key=lambda s: str(s["metadata"]["name"]))


def assert_whole_gpus_only(pool: list[dict[str, Any]]) -> None:
    specs = [s["spec"] for s in pool]
    devices = [d for spec in specs for d in spec.get("devices") or []]
    assert sorted(d["name"] for d in devices) == WHOLE_GPUS
    assert not any(spec.get("sharedCounters") for spec in specs)
    assert not any(d.get("consumesCounters") or d.get("allowMultipleAllocations") for d in devices)
    types = {d["attributes"]["gpu.tessera.dev/type"]["string"] for d in devices}
    assert types == {"gpu"}
    # One consistent generation that counts every slice of the pool.
    assert {(spec["pool"]["generation"], spec["pool"]["resourceSliceCount"]) for spec in specs} == {
        (specs[0]["pool"]["generation"], len(pool))
    }


def degrade_events(api: k8s.ApiClient, node: str) -> list[k8s.CoreV1Event]:
    listed = k8s.CoreV1Api(api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={node},reason={DEGRADED_REASON}"
    )
    return list(listed.items or [])


def wait_for(what: str, probe: Any, *, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while not (value := probe()):
        assert time.monotonic() < deadline, f"timed out after {timeout_s}s waiting for {what}"
        time.sleep(0.2)
    return value


def test_the_legacy_release_really_lacks_the_gates(gates_off_plane: ControlPlane, api: k8s.ApiClient) -> None:
    assert not LEGACY.serves_sharing() and gates_off_plane.feature_gates == {}
    info = k8s.VersionApi(api).get_code()
    assert info.git_version == LEGACY.version


def test_dropped_fields_are_noticed_reported_and_degraded(api: k8s.ApiClient, node: str) -> None:
    pub = SlicePublisher(
        api=k8s.ResourceV1Api(api), node_name=node, events=NodeEvents(rest=RestCalls(api), node_name=node)
    )
    with capture_logs() as logs:
        first = pub.publish(slices_for(node))

    assert first.degraded and pub.degraded
    assert first.generation == 1 and first.created == 5
    dropped = "\n".join(first.dropped)
    # The counter slice lost its counter sets; the devices lost what consumes them and what shares them.
    assert f"{node}-gpu.tessera.dev-0: spec.sharedCounters" in first.dropped
    for field in ("consumesCounters", "allowMultipleAllocations", "requestPolicy"):
        assert field in dropped, f"{field} not reported as dropped: {first.dropped[:10]}"
    assert [e["event"] for e in logs if e["log_level"] == "error"] == ["publisher.degraded"]

    (event,) = degrade_events(api, node)
    assert event.type == "Warning"
    assert event.involved_object.kind == "Node" and event.involved_object.name == node
    assert "whole GPUs only" in (event.message or "")
    assert "sharedCounters" in (event.message or "")
    assert "DRAPartitionableDevices and DRAConsumableCapacity" in (event.message or "")

    # What `run()` does next: republish the degraded form.
    fallback = pub.publish(slices_for(node, degraded=True))
    assert not fallback.degraded, fallback.dropped
    assert fallback.generation == 2 and fallback.deleted == 4 and fallback.updated == 1
    assert_whole_gpus_only(stored_pool(api, node))
    assert len(degrade_events(api, node)) == 1  # the clean fallback reports nothing new


def test_taints_the_server_drops_withdraw_the_unhealthy_gpu_instead(api: k8s.ApiClient, node: str) -> None:
    pub = SlicePublisher(
        api=k8s.ResourceV1Api(api), node_name=node, events=NodeEvents(rest=RestCalls(api), node_name=node)
    )
    first = pub.publish(slices_for(node, degraded=True, sick=3))
    assert first.taints_dropped and not first.degraded and not pub.taints_supported
    assert not any(d.get("taints") for s in stored_pool(api, node) for d in s["spec"].get("devices") or [])
    events = k8s.CoreV1Api(api).list_namespaced_event(
        EVENT_NAMESPACE, field_selector=f"involvedObject.name={node},reason={TAINTS_DROPPED_REASON}"
    )
    (event,) = events.items
    assert event.type == "Warning" and "withdrawn" in (event.message or "")
    # what `run()` does next: the unhealthy GPU offers nothing, the others stay
    again = pub.publish(slices_for(node, degraded=True, sick=3, taints_supported=False))
    assert not again.taints_dropped
    names = [d["name"] for s in stored_pool(api, node) for d in s["spec"].get("devices") or []]
    assert sorted(names) == [n for n in WHOLE_GPUS if n != "gpu-3"]


def test_run_falls_back_to_whole_gpus_and_stays_there(api: k8s.ApiClient, node: str) -> None:
    pub = SlicePublisher(
        api=k8s.ResourceV1Api(api), node_name=node, events=NodeEvents(rest=RestCalls(api), node_name=node)
    )
    asked: list[bool] = []

    def desired(degraded: bool) -> list[dict[str, Any]]:
        asked.append(degraded)
        return slices_for(node, degraded=degraded)

    stop = threading.Event()
    loop = threading.Thread(
        target=pub.run,
        kwargs={"desired": desired, "stop": stop, "watch_s": 1, "degraded_resync_s": 0.3},
    )
    with capture_logs() as logs:
        loop.start()
        try:
            wait_for("a degraded pool", lambda: pub.degraded and len(stored_pool(api, node)) == 1)
            settled = stored_pool(api, node)
            assert_whole_gpus_only(settled)
            assert asked[:2] == [False, True]
            # Stable: three more resyncs, each probing the server and republishing the fallback, rewrite
            # nothing.
            rounds = len(asked)
            wait_for("three resyncs", lambda: len(asked) >= rounds + 6)
            assert stored_pool(api, node) == settled
            assert degrade_events(api, node)
            assert sum(e["event"] == "publisher.still_dropped" for e in logs) >= 3
        finally:
            stop.set()
            loop.join(timeout=15)
    assert not loop.is_alive()


def test_daemon_publishes_whole_gpus_only(
    gates_off_plane: ControlPlane, api: k8s.ApiClient, node: str
) -> None:
    # Short: unix socket paths may not pass 108 bytes, pytest's tmp_path can.
    root = Path(tempfile.mkdtemp(prefix="tsd-", dir="/tmp"))
    (root / "claims").mkdir()
    options = DaemonOptions(
        node_name=node,
        root=root,
        simulate=NODE_FILE,
        sim_state=root / "sim-state.json",
        kubeconfig=gates_off_plane.kubeconfig,
        health_interval=60.0,
        publish=True,
        log_level="warning",
    )
    plugin = Node.start(options, claims=directory_claims(root / "claims"))
    try:
        assert plugin.publisher is not None
        wait_for(
            "the daemon's degraded pool",
            lambda: (
                plugin.publisher is not None
                and plugin.publisher.degraded
                and sorted(d["name"] for s in stored_pool(api, node) for d in s["spec"].get("devices") or [])
                == WHOLE_GPUS
            ),
        )
        assert_whole_gpus_only(stored_pool(api, node))
        assert degrade_events(api, node)
    finally:
        plugin.stop(grace=0)
        shutil.rmtree(root, ignore_errors=True)


def test_a_probe_reports_what_would_be_dropped_and_stores_nothing(api: k8s.ApiClient, node: str) -> None:
    pub = SlicePublisher(api=k8s.ResourceV1Api(api), node_name=node)
    dropped = pub.probe(with_probe_taint(slices_for(node)))
    assert any(d.endswith("spec.sharedCounters") for d in dropped), dropped
    assert any(d.endswith(".taints") for d in dropped), dropped
    assert any("allowMultipleAllocations" in d for d in dropped), dropped
    assert stored_pool(api, node) == []
    pub.degraded, pub.taints_supported = True, False
    pub.try_restore(lambda degraded: slices_for(node, degraded=degraded))
    assert pub.degraded and not pub.taints_supported  # still dropped: the fallback stays
