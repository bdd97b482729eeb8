"""The GPUs an administrator cordoned or drained on this node, as the Node's annotation says
(dra_driver/core/cordon.py): kept from one read of the Node to the next, with an Event on the Node when it
changes.

A bad annotation (hand-edited) keeps the last good cordons — lifting a cordon because of a typo would put work
back on a GPU someone is replacing — and says so once per bad value, in the log and a Warning Event that names
the fix. An entry written without a time gets the time this daemon first saw it, so the taints it becomes
stay the same from one republish to the next.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Mapping

import structlog

from dra_driver.core.cordon import GpuCordon, parse_cordons, render_cordons
from dra_driver.core.gpu_health import Effect
from dra_driver.io.api_objects import Json, field_at
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.names import CORDON_ANNOTATION
from kubelet_plugin.node.events import NodeEvents

log = structlog.get_logger(__name__)
CORDON_REASON = "GpuCordoned"  # the Node's Events about its GPUs' cordons
CORDON_INVALID_REASON = "GpuCordonInvalid"
WORDS = {Effect.NO_SCHEDULE: "cordoned (no new claims)", Effect.NO_EXECUTE: "drained (its pods are evicted)"}


class GpuCordons:
    """`current()`: GPU index → cordon, as last read; `observe` takes each read of the Node."""

    def __init__(
        self, *, node_name: str, events: NodeEvents | None, clock: Callable[[], float] = time.time
    ) -> None:
        self._node, self._events, self._clock = node_name, events, clock
        self._lock = threading.Lock()
        self._current: dict[int, GpuCordon] = {}
        self._first_seen: dict[tuple[int, Effect], int] = {}
        self._bad: str | None = None  # the last bad value reported, so it is reported once

    def current(self) -> dict[int, GpuCordon]:
        with self._lock:
            return dict(self._current)

    def observe(self, node: Json | None) -> bool:
        """Take the Node as read (None: unreadable, nothing changes); True when the cordons changed."""
        if node is None:
            return False
        annotations: Mapping[str, str] = field_at(node, "metadata", "annotations") or {}
        text = annotations.get(CORDON_ANNOTATION, "")
        try:
            parsed = parse_cordons(text)
        except ConfigError as e:
            self._report_bad(text, str(e))
            return False
        self._bad = None
        cordons = {i: self._timed(c) for i, c in parsed.items()}
        with self._lock:
            before, self._current = self._current, cordons
        self._first_seen = {k: v for k, v in self._first_seen.items() if k[0] in cordons}
        if cordons == before:
            return False
        self._tell(before, cordons)
        return True

    def _timed(self, cordon: GpuCordon) -> GpuCordon:
        if cordon.since:
            return cordon
        key = (cordon.index, cordon.effect)
        since = self._first_seen.setdefault(key, int(self._clock()))
        return GpuCordon(cordon.index, cordon.effect, since)

    def _report_bad(self, text: str, error: str) -> None:
        if text == self._bad:
            return
        self._bad = text
        log.error(
            "plugin.gpu_cordon_invalid", node=self._node, error=error, kept=render_cordons(self._current)
        )
        if self._events is not None:
            self._events.warn(
                reason=CORDON_INVALID_REASON,
                message=f"{error}; the node keeps its last good cordons: "
                f"{render_cordons(self._current) or 'none'}",
            )

    def _tell(self, before: Mapping[int, GpuCordon], after: Mapping[int, GpuCordon]) -> None:
        for index in sorted(before.keys() | after.keys()):
            old, new = before.get(index), after.get(index)
            if old is not None and new is not None and old.effect is new.effect:
                continue
            what = WORDS[new.effect] if new is not None else "uncordoned"
            message = f"node {self._node}: gpu-{index} {what} by an administrator"
            log.info("plugin.gpu_cordon", node=self._node, gpu=index, state=what)
            if self._events is not None:
                self._events.normal(reason=CORDON_REASON, message=message)
