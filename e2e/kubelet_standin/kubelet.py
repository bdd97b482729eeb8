"""The stand-in's control loop: watch the pods bound to this node, prepare their claims through the
registered plugins, create the containers as a CDI-aware runtime would, report them Running; on deletion
unprepare the claims no other pod uses and finalize the pod (delete with grace period 0)."""

from __future__ import annotations

import contextlib
import heapq
import itertools
import os
import threading
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import structlog

from dra_driver.io.files import atomic_write
from dra_driver.vocabulary.errors import TesseraError
from e2e.kubelet_standin.apiserver import GoneError, NodeApi
from e2e.kubelet_standin.cdi_registry import CdiRegistry
from e2e.kubelet_standin.container_edits import ContainerConfig
from e2e.kubelet_standin.errors import CdiError, StandInError
from e2e.kubelet_standin.plugins import ClaimKey, PluginRegistry
from e2e.kubelet_standin.pod_claims import (
    PreparedDevice,
    cdi_ids_for,
    claim_is_ready,
    drivers_of,
    pod_claims,
)
from e2e.kubelet_standin.pod_status import failed_status, running_status
from e2e.kubelet_standin.runtime_record import PodRuntime, PreparedClaim, record_file_name, write_record

log = structlog.get_logger(__name__)

Json = Mapping[str, Any]
WATCH_TIMEOUT_S = 60
RETRY_MIN_S = 0.1
RETRY_MAX_S = 5.0
# A pod whose process something else plays (the node plugin's pod: e2e.harness.node.SimNode starts the daemon
# itself) is left alone, as a kubelet leaves a static pod's mirror object to the static pod manager.
RUN_ELSEWHERE_LABEL = "e2e.tessera.dev/run-elsewhere"


def runs_here(pod: Json) -> bool:
    labels = (pod.get("metadata") or {}).get("labels") or {}
    return labels.get(RUN_ELSEWHERE_LABEL) != "true"


@dataclass(frozen=True, slots=True)
class StandInOptions:
    node_name: str
    plugins_registry: Path  # <root>/var/lib/kubelet/plugins_registry
    cdi_dirs: tuple[Path, ...]  # lowest priority first: <root>/etc/cdi, <root>/var/run/cdi
    runtime_dir: Path  # PodRuntime records
    ready_file: Path  # written (with our pid) once started: slices wiped, watches running
    workers: int = 2
    wipe_grace_s: float = 30.0  # a driver that deregisters and does not return in this time loses its slices
    wipe_at_start: bool = True

    @classmethod
    def under(cls, root: Path, *, node_name: str, **kwargs: Any) -> StandInOptions:
        return cls(
            node_name=node_name,
            plugins_registry=root / "var/lib/kubelet/plugins_registry",
            cdi_dirs=(root / "etc/cdi", root / "var/run/cdi"),
            runtime_dir=root / "var/lib/standin/pods",
            ready_file=root / "var/lib/standin/ready",
            **kwargs,
        )


@dataclass(slots=True)
class _ClaimState:
    key: ClaimKey
    drivers: tuple[str, ...]
    devices: tuple[PreparedDevice, ...]
    pods: set[str]


class _Queue:
    """Pod UIDs to sync, each at most once at a time; a UID added while it is being synced is synced again."""

    def __init__(self) -> None:
        self._cond = threading.Condition()
        self._heap: list[tuple[float, int, str]] = []
        self._counter = itertools.count()
        self._active: set[str] = set()
        self._dirty: set[str] = set()
        self._queued: dict[str, float] = {}
        self.closed = False

    def add(self, uid: str, delay: float = 0.0) -> None:
        at = time.monotonic() + delay
        with self._cond:
            if uid in self._active:
                self._dirty.add(uid)
                return
            if uid in self._queued and self._queued[uid] <= at:
                return
            self._queued[uid] = at
            heapq.heappush(self._heap, (at, next(self._counter), uid))
            self._cond.notify()

    def get(self) -> str | None:
        with self._cond:
            while not self.closed:
                while self._heap and self._queued.get(self._heap[0][2]) != self._heap[0][0]:
                    heapq.heappop(self._heap)  # superseded by an earlier entry
                if self._heap:
                    at, _, uid = self._heap[0]
                    wait = at - time.monotonic()
                    if wait <= 0 and uid not in self._active:
                        heapq.heappop(self._heap)
                        del self._queued[uid]
                        self._active.add(uid)
                        return uid
                    self._cond.wait(timeout=max(wait, 0.01))
                else:
                    self._cond.wait(timeout=1.0)
            return None

    def done(self, uid: str) -> None:
        with self._cond:
            self._active.discard(uid)
            if uid in self._dirty:
                self._dirty.discard(uid)
                self._queued[uid] = time.monotonic()
                heapq.heappush(self._heap, (self._queued[uid], next(self._counter), uid))
            self._cond.notify_all()

    def close(self) -> None:
        with self._cond:
            self.closed = True
            self._cond.notify_all()


class KubeletStandIn:
    def __init__(self, *, options: StandInOptions, api: NodeApi) -> None:
        self.options = options
        self._api = api
        self._plugins = PluginRegistry(registry_dir=options.plugins_registry)
        self._cdi = CdiRegistry(spec_dirs=options.cdi_dirs)
        self._queue = _Queue()
        self._stop = threading.Event()
        self._lock = threading.Lock()
        self._pods: dict[str, Json] = {}
        self._last_seen: dict[str, Json] = {}
        self._running: dict[str, PodRuntime] = {}
        self._claims: dict[str, _ClaimState] = {}
        self._retries: dict[str, int] = {}
        self._ip_counter = itertools.count(2)
        self._threads: list[threading.Thread] = []
        self._deregistered_at: dict[str, float] = {}

    # ---- lifecycle --------------------------------------------------------------------------------------

    def start(self) -> None:
        self.options.ready_file.unlink(missing_ok=True)
        self.options.runtime_dir.mkdir(parents=True, exist_ok=True)
        if self.options.wipe_at_start:
            wiped = self._api.wipe_slices()
            log.info("standin.wiped_slices", node=self.options.node_name, count=wiped)
        self._plugins.scan()
        targets = [self._watch_loop, self._plugin_loop] + [self._work_loop] * self.options.workers
        for k, target in enumerate(targets):
            thread = threading.Thread(target=target, name=f"standin-{k}", daemon=True)
            thread.start()
            self._threads.append(thread)
        # Whoever starts the plugin next waits for this: a wipe that came after the plugin's first publish
        # would delete its fresh slices.
        atomic_write(self.options.ready_file, f"{os.getpid()}\n".encode())
        log.info("standin.started", node=self.options.node_name)

    def request_stop(self) -> None:
        self._stop.set()
        self._queue.close()

    def stop(self) -> None:
        self.request_stop()
        # Workers finish the pod in hand; the watch thread may sit in a long read and is a daemon.
        for thread in self._threads[2:]:
            thread.join(timeout=10)
        self._plugins.close()

    def wait(self) -> None:
        self._stop.wait()

    # ---- loops ------------------------------------------------------------------------------------------

    def _watch_loop(self) -> None:
        while not self._stop.is_set():
            try:
                pods, version = self._api.list_pods()
                self._replace(pods)
                while not self._stop.is_set():
                    for kind, pod in self._api.watch_pods(
                        resource_version=version, timeout_s=WATCH_TIMEOUT_S
                    ):
                        version = pod["metadata"].get("resourceVersion", version)
                        if kind != "BOOKMARK":
                            self._observe(kind, pod)
                        if self._stop.is_set():
                            return
            except GoneError:
                continue
            except StandInError as e:
                log.warning("standin.watch_error", error=str(e))
                self._stop.wait(1.0)

    def _replace(self, pods: Sequence[Json]) -> None:
        pods = [p for p in pods if runs_here(p)]
        seen = {p["metadata"]["uid"] for p in pods}
        with self._lock:
            vanished = [uid for uid in self._pods if uid not in seen]
            for uid in vanished:
                self._last_seen[uid] = self._pods.pop(uid)
            for pod in pods:
                self._pods[pod["metadata"]["uid"]] = pod
        for uid in [*vanished, *seen]:
            self._queue.add(uid)

    def _observe(self, kind: str, pod: Json) -> None:
        if not runs_here(pod):
            return
        uid = pod["metadata"]["uid"]
        with self._lock:
            if kind == "DELETED":
                self._pods.pop(uid, None)
                self._last_seen[uid] = pod
            else:
                self._pods[uid] = pod
        self._queue.add(uid)

    def _plugin_loop(self) -> None:
        while not self._stop.wait(0.2):
            self._plugins.scan()
            now = time.monotonic()
            for driver in list(self._plugins.deregistered):
                since = self._deregistered_at.setdefault(driver, now)
                if now - since >= self.options.wipe_grace_s:
                    self._plugins.deregistered.discard(driver)
                    del self._deregistered_at[driver]
                    with contextlib.suppress(StandInError):
                        count = self._api.wipe_slices(driver=driver)
                        log.info("standin.wiped_slices", driver=driver, count=count)
            for driver in list(self._deregistered_at):
                if driver not in self._plugins.deregistered:
                    del self._deregistered_at[driver]

    def _work_loop(self) -> None:
        while True:
            uid = self._queue.get()
            if uid is None:
                return
            try:
                delay = self._sync(uid)
            except TesseraError as e:
                log.warning("standin.sync_failed", pod_uid=uid, error=str(e))
                delay = self._backoff(uid)
            except Exception:
                log.exception("standin.sync_crashed", pod_uid=uid)
                delay = self._backoff(uid)
            finally:
                self._queue.done(uid)
            if delay is not None:
                self._queue.add(uid, delay)
            else:
                self._retries.pop(uid, None)

    def _backoff(self, uid: str) -> float:
        attempt = self._retries.get(uid, 0)
        self._retries[uid] = attempt + 1
        return float(min(RETRY_MAX_S, RETRY_MIN_S * 2**attempt))

    # ---- one pod ----------------------------------------------------------------------------------------

    def _sync(self, uid: str) -> float | None:
        """Brings one pod where it should be; returns a delay to look again, or None when done."""
        with self._lock:
            pod = self._pods.get(uid)
            last = self._last_seen.get(uid)
        if pod is None:
            if last is not None:
                self._teardown(uid, last)
                with self._lock:
                    self._last_seen.pop(uid, None)
            return None
        meta = pod["metadata"]
        if meta.get("deletionTimestamp"):
            self._teardown(uid, pod)
            self._api.delete_pod(namespace=meta["namespace"], name=meta["name"], uid=uid)
            return None
        if uid in self._running or (pod.get("status") or {}).get("phase") in ("Succeeded", "Failed"):
            return None
        return self._start_pod(pod)

    def _start_pod(self, pod: Json) -> float | None:
        meta = pod["metadata"]
        uid, namespace = meta["uid"], meta["namespace"]
        claims = pod_claims(pod)
        if claims.pending:
            return self._backoff(uid)
        fetched: dict[str, Json] = {}
        for name in claims.claim_names:
            claim = self._api.get_claim(namespace=namespace, name=name)
            if claim is None or not claim_is_ready(claim, uid):
                return self._backoff(uid)
            fetched[name] = claim
        prepared = self._prepare(pod, fetched)
        if prepared is None:
            return self._backoff(uid)
        containers: dict[str, ContainerConfig] = {}
        for container_name, uses in claims.containers.items():
            ids = cdi_ids_for(uses, prepared)
            try:
                containers[container_name] = self._cdi.inject(ids)
            except CdiError as e:
                containers[container_name] = ContainerConfig(
                    cdi_devices=ids, error=f"failed to inject CDI devices: {e}"
                )
        record = PodRuntime(
            node=self.options.node_name,
            namespace=namespace,
            name=meta["name"],
            uid=uid,
            claims=tuple(
                PreparedClaim(name=name, uid=claim["metadata"]["uid"], devices=tuple(prepared.get(name, ())))
                for name, claim in fetched.items()
            ),
            containers=containers,
        )
        write_record(self.options.runtime_dir, record)
        failures = {name: c for name, c in containers.items() if c.error}
        if failures:
            self._api.patch_pod_status(
                namespace=namespace, name=meta["name"], uid=uid, status=failed_status(pod, containers)
            )
            for name, config in failures.items():
                self._api.event(
                    pod=pod, kind="Warning", reason="Failed", message=f"container {name}: {config.error}"
                )
            return RETRY_MAX_S  # the kubelet retries container creation with back-off
        ip = next(self._ip_counter)
        status = running_status(pod, pod_ip=f"10.244.{(ip >> 8) & 255}.{ip & 255}")
        self._api.patch_pod_status(namespace=namespace, name=meta["name"], uid=uid, status=status)
        with self._lock:
            self._running[uid] = record
        log.info("standin.pod_running", pod=f"{namespace}/{meta['name']}", claims=list(fetched))
        return None

    def _prepare(self, pod: Json, claims: Mapping[str, Json]) -> dict[str, tuple[PreparedDevice, ...]] | None:
        """Prepares the pod's claims not prepared yet (one call per driver, as the kubelet batches them);
        returns every claim's devices, or None after reporting a failure as an event."""
        uid = pod["metadata"]["uid"]
        todo: dict[str, list[tuple[str, ClaimKey]]] = {}
        with self._lock:
            for name, claim in claims.items():
                claim_uid = claim["metadata"]["uid"]
                if claim_uid not in self._claims:
                    key = ClaimKey(namespace=claim["metadata"]["namespace"], name=name, uid=claim_uid)
                    for driver in sorted(drivers_of(claim)):
                        todo.setdefault(driver, []).append((name, key))
        answers: dict[str, list[PreparedDevice]] = {}
        errors: list[str] = []
        for driver, keys in todo.items():
            try:
                result = self._plugins.connection(driver).prepare([k for _, k in keys])
            except StandInError as e:
                errors.append(str(e))
                continue
            for name, key in keys:
                answer = result[key.uid]
                if answer.error:
                    errors.append(f"claim {name}: {answer.error}")
                answers.setdefault(key.uid, []).extend(answer.devices)
        if errors:
            self._api.event(
                pod=pod, kind="Warning", reason="FailedPrepareDynamicResources", message="; ".join(errors)
            )
            return None
        prepared: dict[str, tuple[PreparedDevice, ...]] = {}
        with self._lock:
            for name, claim in claims.items():
                claim_uid = claim["metadata"]["uid"]
                state = self._claims.get(claim_uid)
                if state is None:
                    state = _ClaimState(
                        key=ClaimKey(namespace=claim["metadata"]["namespace"], name=name, uid=claim_uid),
                        drivers=tuple(sorted(drivers_of(claim))),
                        devices=tuple(answers.get(claim_uid, ())),
                        pods=set(),
                    )
                    self._claims[claim_uid] = state
                state.pods.add(uid)
                prepared[name] = state.devices
        return prepared

    def _teardown(self, uid: str, pod: Json) -> None:
        """Stops the pod's containers and unprepares each claim no other pod on this node still uses."""
        with self._lock:
            self._running.pop(uid, None)
            mine = [s for s in self._claims.values() if uid in s.pods]
            last = [s for s in mine if s.pods == {uid}]
        for state in last:
            for driver in state.drivers:
                error = self._plugins.connection(driver).unprepare([state.key])[state.key.uid]
                if error:
                    raise StandInError(f"unprepare of claim {state.key.name} failed: {error}")
        with self._lock:
            for state in mine:
                state.pods.discard(uid)
                if not state.pods:
                    self._claims.pop(state.key.uid, None)
        meta = pod["metadata"]
        (self.options.runtime_dir / record_file_name(meta["namespace"], meta["name"], uid)).unlink(
            missing_ok=True
        )
        if last:
            log.info(
                "standin.unprepared",
                pod=f"{meta['namespace']}/{meta['name']}",
                claims=[s.key.name for s in last],
            )

    # ---- for tests --------------------------------------------------------------------------------------

    def prepared_claims(self) -> dict[str, set[str]]:
        with self._lock:
            return {uid: set(s.pods) for uid, s in self._claims.items()}
