"""`SlicePublisher.run()` keeps the pool published: through an API-server restart (a private control
plane, so the session's plane is not disturbed), and after health or MIG changes that ask it to resync."""

from __future__ import annotations

import threading
import uuid
from collections.abc import Callable, Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from structlog.testing import capture_logs

from dra_driver.backends.simulated import SimulatedBackend
from dra_driver.core.settings import NodeSettings
from dra_driver.core.slices import build_slices
from dra_driver.vocabulary.inventory import Inventory
from dra_driver.vocabulary.names import DRIVER_NAME, GpuUUID
from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.nodes import create_node, delete_node
from e2e.controlplane.pytest_fixture import private_control_plane
from e2e.harness.kube import wait_for
from kubelet_plugin.health.service import HealthBoard, InventoryHealthPoller
from kubelet_plugin.publish.publisher import SlicePublisher

pytestmark = pytest.mark.e2e
NODE_FILE = Path(__file__).resolve().parents[3] / "e2e" / "nodes" / "h100x8.yaml"
Desired = Callable[[bool], Sequence[dict[str, Any]]]


@pytest.fixture(scope="module")
def private_plane(tmp_path_factory: pytest.TempPathFactory) -> Iterator[ControlPlane]:
    """A plane of this module's own: its API server is stopped and started again."""
    with private_control_plane(tmp_path_factory.mktemp("controlplane-restart")) as plane:
        yield plane


def new_node(api: k8s.ApiClient) -> str:
    name = f"rec-{uuid.uuid4().hex[:8]}"
    create_node(api, name=name)
    return name


def pool(api: k8s.ApiClient, node: str) -> list[dict[str, Any]]:
    listed = k8s.ResourceV1Api(api).list_resource_slice(
        field_selector=f"spec.nodeName={node},spec.driver={DRIVER_NAME}"
    )
    items: list[dict[str, Any]] = api.sanitize_for_serialization(listed.items or [])  # type: ignore[no-untyped-call]
    return sorted(items, key=lambda s: str(s["metadata"]["name"]))


def complete_at(slices: list[dict[str, Any]]) -> int | None:
    """The pool's generation when every slice it counts is there at that one generation, else None."""
    marks = {(s["spec"]["pool"]["generation"], s["spec"]["pool"]["resourceSliceCount"]) for s in slices}
    if len(marks) != 1:
        return None
    ((generation, count),) = marks
    return int(generation) if count == len(slices) else None


def device_names(slices: list[dict[str, Any]]) -> set[str]:
    return {d["name"] for s in slices for d in s["spec"].get("devices") or []}


class Running:
    """`run()` in a thread; remembers whether it died and why."""

    def __init__(self, pub: SlicePublisher, desired: Desired, **kwargs: Any) -> None:
        self.stop = threading.Event()
        self.error: BaseException | None = None
        self._thread = threading.Thread(target=self._main, args=(pub, desired, kwargs), name="publisher")
        self._thread.start()

    def _main(self, pub: SlicePublisher, desired: Desired, kwargs: dict[str, Any]) -> None:
        try:
            pub.run(desired=desired, stop=self.stop, **kwargs)
        except BaseException as e:
            self.error = e
            raise

    @property
    def alive(self) -> bool:
        return self._thread.is_alive()

    def close(self) -> None:
        self.stop.set()
        self._thread.join(timeout=20)
        assert not self._thread.is_alive(), "run() did not stop"


def test_run_survives_an_api_server_restart(private_plane: ControlPlane) -> None:
    with private_plane.api_client() as api:
        node = new_node(api)
        want = build_slices(
            SimulatedBackend.from_file(node_file=NODE_FILE, state_file=None).inventory(),
            NodeSettings(node_name=node),
        )
        pub = SlicePublisher(api=k8s.ResourceV1Api(api), node_name=node)
        with capture_logs() as logs:
            running = Running(pub, lambda _degraded: want, watch_s=2, backoff_s=0.2)
            try:
                assert wait_for("the first publication", lambda: complete_at(pool(api, node))) == 1

                # Killed, not drained: a crash; and a SIGTERM would take the apiserver >10 s here.
                with private_plane.stopped("kube-apiserver", grace_s=0):
                    wait_for(
                        "a retry while the API server is down",
                        lambda: _retries(logs) or not running.alive,
                        timeout_s=15,
                    )
                    assert running.alive, f"run() died: {running.error!r}"
                    published_before = len(_published(logs))  # nothing gets through while it is down
                retries_while_down = len(_retries(logs))

                # Back up with the same data: the first publish that gets through (the retries go on) finds
                # nothing to repair, so nothing is rewritten.
                (after,) = wait_for(
                    "a publish after the restart", lambda: _published(logs)[published_before:][:1]
                )
                what = {k: after[k] for k in ("generation", "created", "updated", "deleted")}
                assert what == {"generation": 1, "created": 0, "updated": 0, "deleted": 0}
                assert complete_at(pool(api, node)) == 1
                k8s.ResourceV1Api(api).delete_resource_slice(f"{node}-gpu.tessera.dev-3")
                assert wait_for("the repaired pool", lambda: complete_at(pool(api, node))) == 2
                assert len(pool(api, node)) == 5 and device_names(pool(api, node)) == device_names(want)
                assert running.alive, f"run() died: {running.error!r}"
            finally:
                running.close()
            assert running.error is None
        assert retries_while_down >= 1
        delete_node(api, name=node)


def _retries(logs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [e for e in logs if e.get("event") == "publisher.retry"]


def _published(logs: Sequence[Mapping[str, Any]]) -> list[Mapping[str, Any]]:
    return [e for e in logs if e.get("event") == "publisher.published"]


def _node_file(directory: Path, *, unhealthy_last: bool) -> Path:
    """h100x8 as 7 + 1 GPUs (same UUID seed), the last one faulty or not."""
    document = yaml.safe_load(NODE_FILE.read_text())
    document["seed"] = document["nodeName"]
    gpu = document["gpus"][0]
    document["gpus"] = [
        {**gpu, "count": 7},
        {**gpu, "count": 1, "healthy": not unhealthy_last},
    ]
    path = directory / f"node-{'sick' if unhealthy_last else 'well'}.yaml"
    path.write_text(yaml.safe_dump(document))
    return path


def test_health_and_mig_changes_are_republished(
    k8s_api: k8s.ApiClient, tmp_path: Path, node_factory: Callable[..., Any]
) -> None:
    node = f"rec-{uuid.uuid4().hex[:8]}"
    node_factory(node)
    settings = NodeSettings(node_name=node)
    # Health is fixed per node file: a faulty GPU is a second backend over the same GPUs.
    well = SimulatedBackend.from_file(node_file=_node_file(tmp_path, unhealthy_last=False), state_file=None)
    sick = SimulatedBackend.from_file(node_file=_node_file(tmp_path, unhealthy_last=True), state_file=None)
    assert [g.uuid for g in well.inventory().gpus] == [g.uuid for g in sick.inventory().gpus]
    current = [well]

    def inventory() -> Inventory:
        return current[0].inventory()

    def desired(degraded: bool) -> Sequence[dict[str, Any]]:
        return build_slices(inventory(), settings, degraded=degraded)

    pub = SlicePublisher(api=k8s.ResourceV1Api(k8s_api), node_name=node)
    # The daemon's wiring: the health poller asks the publisher to resync when health changes.
    poller = InventoryHealthPoller(
        read=inventory,
        board=HealthBoard(pool=node),
        interval=0.2,
        on_change=pub.request_resync,
    )
    poller.poll_once()
    running = Running(pub, desired, watch_s=1)  # the periodic resync (300 s) never comes
    poller.start()
    try:
        assert wait_for("the first publication", lambda: complete_at(pool(k8s_api, node))) == 1
        before = device_names(pool(k8s_api, node))
        assert {"gpu-7", "gpu-7-vgpu", "gpu-7-mig-1g10gb-0"} <= before

        current[0] = sick  # GPU 7 reports a fault: every device of it is tainted, nothing else changes
        assert wait_for("GPU 7's devices tainted", lambda: complete_at(pool(k8s_api, node)) == 2)
        after = pool(k8s_api, node)
        assert device_names(after) == before
        marks = {
            d["name"]: [(t["key"], t.get("value"), t["effect"]) for t in d.get("taints") or []]
            for s in after
            for d in s["spec"].get("devices") or []
        }
        sick_mark = [("gpu.tessera.dev/unhealthy", "reported", "NoSchedule")]
        assert {n: m for n, m in marks.items() if m} == {
            n: sick_mark for n in before if n.startswith("gpu-7")
        }
        counter_sets = {c["name"] for s in after for c in s["spec"].get("sharedCounters") or []}
        assert {"gpu-7-counters", "gpu-6-counters"} <= counter_sets

        # An administrator makes a MIG instance on GPU 0 behind Tessera's back: no health change, so the
        # resync is asked for directly (as prepare/unprepare do).
        gpu0 = GpuUUID(sick.inventory().gpus[0].uuid)
        sick.set_mig_mode(gpu=gpu0, enabled=True)
        made = sick.create_mig_instance(gpu=gpu0, profile_id=_profile_id(sick, "3g.40gb"), start=0)
        pub.request_resync()

        def published_static() -> list[dict[str, Any]] | None:
            # a resync may land between the two calls above (MIG mode on, no instance yet): wait for the
            # pool that shows the instance, at whatever generation that is
            slices = pool(k8s_api, node)
            found = [
                d
                for s in slices
                for d in s["spec"].get("devices") or []
                if d["name"] == "gpu-0-mig-3g40gb-0" and "gpu.tessera.dev/uuid" in d["attributes"]
            ]
            return slices if found and (complete_at(slices) or 0) >= 3 else None

        final = wait_for("the static MIG device", published_static)
        static = next(
            d for s in final for d in s["spec"].get("devices") or [] if d["name"] == "gpu-0-mig-3g40gb-0"
        )
        assert static["attributes"]["gpu.tessera.dev/uuid"]["string"] == made.uuid
        assert "gpu-0" not in device_names(final) and "gpu-0-vgpu" not in device_names(final)
        assert running.alive
    finally:
        poller.stop()
        running.close()
    assert running.error is None


def _profile_id(backend: SimulatedBackend, name: str) -> int:
    return next(p.profile_id for p in backend.inventory().gpus[0].mig_profiles if p.name == name)
