"""Publishes the node pool's ResourceSlices through `ResourceV1Api` and keeps them published.

`publish(slices)` lists the pool's slices, writes only what differs (nothing when nothing changed), owns
`pool.generation`, retries on 409 Conflict with a fresh read, and reads back: when the API server dropped
fields (a feature gate off: consumable capacity, partitionable devices) it logs, emits a Warning Event on the
Node and reports `degraded`, so the caller republishes whole GPUs only. `run(...)` watches the pool and
republishes on foreign changes, watch errors, API-server restarts, requests and a periodic resync; while
degraded, each resync first asks the API server (dry-run creates, nothing stored) whether it would now keep
the full pool, so turning the gates on is enough to get the sharing families back.
"""

from __future__ import annotations

import copy
import json
import threading
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import structlog
from kubernetes import client as k8s
from kubernetes import watch as k8s_watch
from kubernetes.client.exceptions import ApiException

# urllib3's own errors (not OSError) when the API server is down or drops a connection (MaxRetryError,
# ProtocolError): they become PublishError here, so `run` retries instead of dying.
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.core.cluster_features import numa_list_advice, sharing_advice
from dra_driver.core.families.published import has_numa_list, numa_list_unkept, scalar_numa
from dra_driver.io.rest_calls import status_message
from dra_driver.vocabulary.errors import PublishError, SliceRefusedError
from dra_driver.vocabulary.names import DRIVER_NAME, UNHEALTHY_TAINT_KEY
from kubelet_plugin import metrics
from kubelet_plugin.node.events import NodeEvents
from kubelet_plugin.publish.slice_plan import Json, Plan, Verb, dropped_fields, plan

log = structlog.get_logger(__name__)

DEGRADED_REASON = "ResourceSliceFieldsDropped"
TAINTS_DROPPED_REASON = "DeviceTaintsDropped"
NUMA_LIST_DROPPED_REASON = "NumaNodeListDropped"
RESTORED_REASON = "ResourceSliceFieldsKept"


@dataclass(frozen=True, slots=True)
class PublishResult:
    generation: int
    created: int = 0
    updated: int = 0
    deleted: int = 0
    conflicts: int = 0
    dropped: tuple[str, ...] = ()  # fields the API server did not keep
    taints_dropped: bool = False  # device taints the API server did not keep (DRADeviceTaints off)
    numa_list_dropped: bool = False  # a list-valued numaNode it did not keep (DRAListTypeAttributes off)

    @property
    def writes(self) -> int:
        return self.created + self.updated + self.deleted

    @property
    def degraded(self) -> bool:
        return bool(self.dropped)


class SlicePublisher:
    def __init__(
        self,
        *,
        api: k8s.ResourceV1Api,
        node_name: str,
        driver_name: str = DRIVER_NAME,
        events: NodeEvents | None = None,
        max_conflicts: int = 8,
    ) -> None:
        self._api = api
        self._events = events
        self._node = node_name
        self._driver = driver_name
        self._max_conflicts = max_conflicts
        self._resync = threading.Event()
        self._trigger = "requested"  # why the pending resync was asked for (a metric label)
        self._written: dict[str, str] = {}  # slice name → resourceVersion of our last write
        self._lock = threading.Lock()
        self.degraded = False
        self.taints_supported = True  # until the API server drops a device taint we wrote
        self.numa_scalar = False  # numaNode written as an int: the API server did not keep the list

    @property
    def field_selector(self) -> str:
        return f"spec.nodeName={self._node},spec.driver={self._driver}"

    # -- one publication ---------------------------------------------------------------------------

    def list_existing(self) -> tuple[list[Json], str]:
        """The pool's slices as wire dicts, and the list's resourceVersion (to start a watch from)."""
        try:
            # As JSON, not as models: the watch loop lists every `watch_s`, and turning a pool of 200+ devices
            # into models and back costs a node's plugin (and a process publishing for many) real CPU.
            response: Any = self._api.list_resource_slice(
                field_selector=self.field_selector, _preload_content=False
            )
            listed = json.loads(response.data)
        except ApiException as e:
            raise PublishError(f"listing ResourceSlices of node {self._node}: {e.status} {e.reason}") from e
        except TransportError as e:
            raise PublishError(
                f"listing ResourceSlices of node {self._node}: API server unreachable: {e}"
            ) from e
        items: list[Json] = list(listed.get("items") or [])
        return items, str((listed.get("metadata") or {}).get("resourceVersion") or "")

    def _apply(self, p: Plan) -> tuple[int, int, int]:
        created = updated = deleted = 0
        for action in p.actions:
            if action.verb is not Verb.DELETE:
                body = k8s.V1ResourceSlice.from_dict(action.body)
                assert body is not None
                if action.verb is Verb.CREATE:
                    made = self._api.create_resource_slice(body=body, field_validation="Strict")
                    created += 1
                else:
                    made = self._api.replace_resource_slice(
                        name=action.name, body=body, field_validation="Strict"
                    )
                    updated += 1
                self._written[action.name] = str(made.metadata.resource_version if made.metadata else "")
            else:
                options = k8s.V1DeleteOptions(
                    preconditions=k8s.V1Preconditions(resource_version=action.resource_version)
                )
                try:
                    self._api.delete_resource_slice(name=action.name, body=options)
                except ApiException as e:
                    if e.status != 404:
                        raise
                self._written.pop(action.name, None)
                deleted += 1
        return created, updated, deleted

    def publish(self, slices: Sequence[Json]) -> PublishResult:
        """Make the pool on the API server equal `slices` (whose generation is ignored). A list-valued
        numaNode the API server does not keep (DRAListTypeAttributes off) is an int from then on."""
        with self._lock:
            if self.numa_scalar:
                return self._publish(scalar_numa(slices))
            try:
                result = self._publish(slices)
            except SliceRefusedError as e:
                if not (has_numa_list(slices) and numa_list_unkept([str(e)])):
                    raise
                self._no_numa_list()
                return self._publish(scalar_numa(slices))
            if result.numa_list_dropped:
                self._no_numa_list()
                return self._publish(scalar_numa(slices))
            return result

    def _publish(self, slices: Sequence[Json]) -> PublishResult:
        """One publication of exactly `slices`; the caller holds the lock."""
        for s in slices:
            if s["spec"].get("nodeName") != self._node or s["spec"].get("driver") != self._driver:
                raise PublishError(
                    f"slice {s['metadata']['name']} is not for node {self._node}/{self._driver}"
                )
        conflicts = 0
        totals = [0, 0, 0]
        while True:
            existing, _ = self.list_existing()
            p = plan(slices, existing)
            if not p.actions:
                # Already as wanted (e.g. after a restart): adopt what is there as our own writes.
                self._written = _versions(existing)
            try:
                for i, n in enumerate(self._apply(p)):
                    totals[i] += n
                break
            except ApiException as e:
                if e.status == 422:
                    refused = f"ResourceSlices of node {self._node}: {status_message(e)}"
                    raise SliceRefusedError(f"the API server refused {refused}") from e
                if e.status != 409 or conflicts >= self._max_conflicts:
                    raise PublishError(
                        f"writing ResourceSlices of node {self._node}: {e.status} {e.reason}: {e.body}"
                    ) from e
                conflicts += 1
                log.info("publisher.conflict", node=self._node, attempt=conflicts)
                time.sleep(min(0.05 * 2**conflicts, 1.0))
            except TransportError as e:
                raise PublishError(
                    f"writing ResourceSlices of node {self._node}: API server unreachable: {e}"
                ) from e
        dropped: tuple[str, ...] = ()
        if p.actions:
            stored, _ = self.list_existing()
            dropped = tuple(dropped_fields([s for s in slices], stored))
        for verb, n in zip(("create", "update", "delete"), totals, strict=True):
            if n:
                metrics.SLICE_WRITES.labels(verb).inc(n)
        if conflicts:
            metrics.SLICE_CONFLICTS.inc(conflicts)
        taint_paths = tuple(d for d in dropped if _is_taint(d))
        numa_paths = tuple(d for d in dropped if numa_list_unkept([d]))
        dropped = tuple(d for d in dropped if not _is_taint(d) and d not in numa_paths)
        result = PublishResult(
            p.generation,
            created=totals[0],
            updated=totals[1],
            deleted=totals[2],
            conflicts=conflicts,
            dropped=dropped,
            taints_dropped=bool(taint_paths),
            numa_list_dropped=bool(numa_paths),
        )
        log.info(
            "publisher.published",
            node=self._node,
            generation=result.generation,
            slices=len(slices),
            created=result.created,
            updated=result.updated,
            deleted=result.deleted,
        )
        if result.degraded:
            self._degrade(result.dropped)
        if result.taints_dropped and self.taints_supported:
            self._no_taints()
        return result

    def _degrade(self, dropped: Sequence[str], *, refused: bool = False) -> None:
        self.degraded = True
        shown = "; ".join(dropped[:5]) + (" …" if len(dropped) > 5 else "")
        if refused:
            message = (
                f"{shown}; Tessera keeps each node's counter sets in slices of their own, which the API "
                "accepts from Kubernetes 1.35 on (1.34's alpha API wants them beside the devices, at most 32 "
                "counters a slice): publishing whole GPUs only; upgrade to 1.36 or newer for every family"
            )
        else:
            message = (
                f"the API server dropped fields of Tessera's ResourceSlices ({shown}); the "
                "DRAConsumableCapacity or DRAPartitionableDevices feature gate is probably off: "
                f"publishing whole GPUs only until the API server keeps them; {sharing_advice()}"
            )
        log.error("publisher.degraded", node=self._node, dropped=list(dropped), message=message)
        if self._events is not None:
            self._events.warn(reason=DEGRADED_REASON, message=message)

    def _no_taints(self) -> None:
        self.taints_supported = False
        message = (
            "the API server dropped the device taints of Tessera's ResourceSlices (the DRADeviceTaints "
            "feature gate is off): unhealthy GPUs are withdrawn from the ResourceSlices instead of tainted, "
            "and pods on them are not evicted"
        )
        log.error("publisher.taints_dropped", node=self._node, message=message)
        if self._events is not None:
            self._events.warn(reason=TAINTS_DROPPED_REASON, message=message)

    def _no_numa_list(self) -> None:
        self.numa_scalar = True
        message = numa_list_advice()
        log.error("publisher.numa_list_dropped", node=self._node, message=message)
        if self._events is not None:
            self._events.warn(reason=NUMA_LIST_DROPPED_REASON, message=message)

    # -- leaving the fallback ----------------------------------------------------------------------

    def probe(self, slices: Sequence[Json]) -> tuple[str, ...]:
        """The fields of `slices` the API server would drop now, asked with dry-run creates under generated
        names: nothing is stored, and the live pool is not touched. A slice it refuses counts as dropped."""
        dropped: list[str] = []
        for wanted in slices:
            name = str(wanted["metadata"]["name"])
            body = copy.deepcopy(dict(wanted))
            body["metadata"] = {"generateName": f"{name}-probe-"}
            model = k8s.V1ResourceSlice.from_dict(body)
            assert model is not None
            try:
                response: Any = self._api.create_resource_slice(
                    body=model,
                    dry_run="All",
                    field_validation="Strict",
                    _preload_content=False,
                )
                answered = json.loads(response.data)
            except ApiException as e:
                if e.status not in (400, 422):
                    # Not an answer about the fields (a server still starting, throttling): ask again later.
                    raise PublishError(
                        f"probing ResourceSlices of node {self._node}: {e.status} {e.reason}"
                    ) from e
                dropped.append(f"{name}: refused: {status_message(e)}")
                continue
            except TransportError as e:
                raise PublishError(f"probing ResourceSlices of node {self._node}: {e}") from e
            answered["metadata"]["name"] = name
            dropped += dropped_fields([wanted], [answered])
        return tuple(dropped)

    def try_restore(self, desired: Callable[[bool], Sequence[Json]]) -> None:
        """While degraded (or without device taints): when the API server now keeps what it dropped, leave the
        fallback, so the next publish is the full pool again."""
        full = desired(False)
        # A list-valued numaNode the server does not keep is no field of this fallback: ask about the int.
        dropped = self.probe(with_probe_taint(scalar_numa(full) if self.numa_scalar else full))
        taints_kept = not any(_is_taint(d) for d in dropped)
        fields_kept = not any(not _is_taint(d) for d in dropped)
        restored = []
        if self.degraded and fields_kept:
            self.degraded = False
            restored.append("shared counters and multi-allocatable devices: publishing every family again")
        if not self.taints_supported and taints_kept:
            self.taints_supported = True
            restored.append("device taints: unhealthy GPUs are tainted again instead of withdrawn")
        if not restored:
            log.info("publisher.still_dropped", node=self._node, dropped=list(dropped[:5]))
        else:
            message = "the API server keeps Tessera's ResourceSlice fields now: " + "; ".join(restored)
            log.warning("publisher.restored", node=self._node, message=message)
            if self._events is not None:
                self._events.normal(reason=RESTORED_REASON, message=message)

    # -- keeping it published ----------------------------------------------------------------------

    def request_resync(self, trigger: str = "requested") -> None:
        """Ask `run` to republish soon (inventory, MIG mode or health changed; `foreign`: someone else
        changed the pool)."""
        self._trigger = trigger
        self._resync.set()

    def _foreign(self, event: Json) -> bool:
        """Whether a watch event is someone else's doing (our writes echo back with our resourceVersion)."""
        obj = event.get("object") or {}
        meta = obj.get("metadata") or {}
        name, rv = meta.get("name"), meta.get("resourceVersion")
        if event.get("type") == "DELETED":
            return name in self._written
        return self._written.get(str(name)) != rv

    def _drifted(self, existing: Sequence[Json]) -> bool:
        """Whether the listed pool differs from what we last wrote (added, removed or rewritten)."""
        return _versions(existing) != self._written

    def run(
        self,
        *,
        desired: Callable[[bool], Sequence[Json]],
        stop: threading.Event,
        resync_s: float = 300.0,
        degraded_resync_s: float = 60.0,
        watch_s: int = 10,
        backoff_s: float = 1.0,
        poll_s: float = 0.2,
        on_published: Callable[[], None] | None = None,
    ) -> None:
        """Publish `desired(degraded)` and keep it published until `stop` is set; `on_published` is told after
        each successful publish. While degraded it resyncs every `degraded_resync_s`, so gates turned on
        behind a load balancer (the watch may never break) are noticed within that time.

        The watch runs in a thread of its own, so a `request_resync()` (health, MIG mode) and `stop` take
        effect within `poll_s` instead of waiting for an open watch to end.
        """
        watcher = threading.Thread(
            target=self._watch_loop,
            kwargs={"stop": stop, "watch_s": watch_s, "backoff_s": backoff_s},
            name=f"slice-watch-{self._node}",
            daemon=True,  # may sit in a blocking read for up to watch_s after stop
        )
        watcher.start()
        next_resync = 0.0
        while not stop.is_set():
            requested = self._resync.is_set()
            if time.monotonic() >= next_resync or requested:
                self._resync.clear()
                metrics.SLICE_RESYNCS.labels(self._trigger if requested else "periodic").inc()
                try:
                    if self.degraded or not self.taints_supported:
                        self.try_restore(desired)
                    try:
                        result = self.publish(desired(self.degraded))
                    except SliceRefusedError as e:
                        if self.degraded:
                            raise
                        self._degrade((str(e),), refused=True)
                        result = self.publish(desired(self.degraded))
                    if result.degraded or result.taints_dropped:
                        self.publish(desired(self.degraded))
                    fallback = self.degraded or not self.taints_supported
                    next_resync = time.monotonic() + (degraded_resync_s if fallback else resync_s)
                    if on_published is not None:
                        on_published()
                except (PublishError, ApiException, OSError) as e:
                    # API server restarting or unreachable: back off, then re-list and republish.
                    metrics.SLICE_ERRORS.inc()
                    log.warning("publisher.retry", node=self._node, error=str(e))
                    next_resync = time.monotonic() + backoff_s
            stop.wait(poll_s)

    def _watch_loop(self, *, stop: threading.Event, watch_s: int, backoff_s: float) -> None:
        """Ask for a republish whenever the pool stops being what we last wrote."""
        while not stop.is_set():
            try:
                existing, rv = self.list_existing()
                # A change made between our last write and this list never shows up in the watch.
                if self._drifted(existing) or self._watch_once(rv, watch_s, stop):
                    self.request_resync("foreign")
            except (PublishError, ApiException, OSError) as e:
                log.warning("publisher.watch_retry", node=self._node, error=str(e))
                self.request_resync("watch-error")
                stop.wait(backoff_s)

    def _watch_once(self, resource_version: str, watch_s: int, stop: threading.Event) -> bool:
        """Watch the pool for up to `watch_s`; True when something not ours changed it."""
        w = k8s_watch.Watch()  # type: ignore[no-untyped-call]
        try:
            for event in w.stream(  # type: ignore[no-untyped-call]
                self._api.list_resource_slice,
                field_selector=self.field_selector,
                resource_version=resource_version,
                timeout_seconds=watch_s,
            ):
                raw = event.get("raw_object") or {}
                if event.get("type") == "ERROR":
                    return True
                if self._foreign({"type": event.get("type"), "object": raw}):
                    log.info("publisher.foreign_change", node=self._node, type=event.get("type"))
                    return True
                if stop.is_set():
                    return False
        except TransportError as e:
            raise PublishError(f"watching ResourceSlices of node {self._node}: connection lost: {e}") from e
        finally:
            w.stop()  # type: ignore[no-untyped-call]
        return False


def _is_taint(dropped: str) -> bool:
    """Whether a dropped field (`<slice>: spec.devices[3].taints`) is a device's taints."""
    return dropped.rsplit(".", 1)[-1] == "taints" or ".taints[" in dropped


def with_probe_taint(slices: Sequence[Json]) -> list[Json]:
    """`slices` with a taint on the first device that has none, so a probe also asks about taints."""
    out = [copy.deepcopy(dict(s)) for s in slices]
    for s in out:
        for device in s["spec"].get("devices") or []:
            if not device.get("taints"):
                device["taints"] = [{"key": UNHEALTHY_TAINT_KEY, "value": "probe", "effect": "NoSchedule"}]
                return out
    return out


def _versions(slices: Sequence[Json]) -> dict[str, str]:
    """Slice name → resourceVersion, the form in which the publisher remembers its own writes."""
    return {str(e["metadata"]["name"]): str(e["metadata"].get("resourceVersion")) for e in slices}
