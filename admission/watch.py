"""A list and watch of one kind of object, kept in memory by a thread (client-go's informer, small).

The webhook answers reviews from what it has seen, never with an API call per review, and its template
reconciler acts on what changes: both read such a view. It lists in pages, then watches from the list's
resourceVersion; a watch that ends is resumed from the last version seen, an expired one (410) or any error
means a fresh list after a pause. Objects are reduced by `keep` (None: not kept) before they are stored,
so a view of every Pod or template in a cluster holds only the few fields its reader needs. `on_event` hears
ADDED, MODIFIED and DELETED (a fresh list reports what changed since the last one the same way).
"""

from __future__ import annotations

import threading
from collections.abc import Callable, Generator, Mapping
from typing import Any, Protocol

import structlog

from dra_driver.io.rest_calls import RestCalls
from dra_driver.vocabulary.excerpt import clip

log = structlog.get_logger()
Obj = Mapping[str, Any]
Key = tuple[str, str]
Handler = Callable[[str, Obj], None]
PAGE = 500


class ExpiredError(Exception):
    """The watch's resourceVersion is too old (410 Gone): list again."""


def key_of(obj: Obj) -> Key:
    metadata = obj.get("metadata") or {}
    return str(metadata.get("namespace") or ""), str(metadata.get("name") or "")


class Source(Protocol):
    """Where a view reads one kind: a page of its list, and a watch from a resourceVersion."""

    def page(self, *, limit: int, token: str | None) -> Obj:
        """`items`, and `metadata` with `resourceVersion` and `continue` (the next page's token)."""
        ...

    def events(self, *, version: str, timeout_s: int) -> Generator[Obj, None, None]:
        """The watch's events (`type`, `object`) until it ends."""
        ...


class ApiSource:
    """A collection path of the API server (a template of dra_driver/io/api_objects.py), with a fixed query
    (e.g. a labelSelector), over RestCalls."""

    def __init__(self, rest: RestCalls, path: str, **query: str) -> None:
        self._rest, self._path, self._query = rest, path, query

    def page(self, *, limit: int, token: str | None) -> Obj:
        more = {"continue": token} if token else {}
        return self._rest.get(self._path, limit=limit, **self._query, **more)

    def events(self, *, version: str, timeout_s: int) -> Generator[Obj, None, None]:
        query = {**self._query, "resourceVersion": version, "allowWatchBookmarks": "true"}
        return self._rest.watch(self._path, timeout_s=timeout_s, **query)


class Watched:
    """The objects of `source`, kept current by a thread."""

    def __init__(
        self,
        *,
        name: str,
        source: Source,
        keep: Callable[[Obj], Obj | None],
        on_event: Handler | None = None,
        watch_s: int = 300,
        backoff_s: float = 2.0,
    ) -> None:
        self.name = name
        self._source, self._keep = source, keep
        self.on_event = on_event  # may be set before start()
        self._watch_s, self._backoff_s = watch_s, backoff_s
        self._objects: dict[Key, Obj] = {}
        self._lock = threading.Lock()
        self._synced, self._stop = threading.Event(), threading.Event()
        self._thread = threading.Thread(target=self._run, name=f"watch-{name}", daemon=True)

    @property
    def synced(self) -> bool:
        """The first list is in."""
        return self._synced.is_set()

    def wait_synced(self, timeout_s: float) -> bool:
        return self._synced.wait(timeout_s)

    def get(self, namespace: str, name: str) -> Obj | None:
        with self._lock:
            return self._objects.get((namespace, name))

    def items(self) -> list[Obj]:
        with self._lock:
            return list(self._objects.values())

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=1)  # it may sit in a blocking read until the watch's timeout

    # ---- the thread ------------------------------------------------------------------------------

    def _run(self) -> None:
        while not self._stop.is_set():
            try:
                version = self._list()
                self._synced.set()
                while not self._stop.is_set():
                    version = self._watch(version)
            except ExpiredError:
                log.info("watch expired; listing again", watch=self.name)
            except Exception as e:  # an API server away, a broken stream: list again later
                log.warning("watch failed; listing again", watch=self.name, error=clip(str(e), 300))
                self._stop.wait(self._backoff_s)

    def _list(self) -> str:
        found: dict[Key, Obj] = {}
        token: str | None = None
        while True:
            body = self._source.page(limit=PAGE, token=token)
            for item in body.get("items") or []:
                kept = self._keep(item)
                if kept is not None:
                    found[key_of(kept)] = kept
            metadata = body.get("metadata") or {}
            if not metadata.get("continue"):
                break
            token = str(metadata["continue"])
        with self._lock:
            before, self._objects = self._objects, found
        for key, obj in before.items():
            if key not in found:
                self._tell("DELETED", obj)
        for key, obj in found.items():
            if key not in before:
                self._tell("ADDED", obj)
            elif before[key] != obj:
                self._tell("MODIFIED", obj)
        return str(metadata.get("resourceVersion") or "")

    def _watch(self, version: str) -> str:
        events = self._source.events(version=version, timeout_s=self._watch_s)
        try:
            for event in events:
                kind, obj = event.get("type"), event.get("object") or {}
                if kind == "ERROR":
                    if obj.get("code") == 410:
                        raise ExpiredError()
                    raise ValueError(f"watch error: {clip(str(obj.get('message')), 300)}")
                version = str((obj.get("metadata") or {}).get("resourceVersion") or version)
                if kind in ("ADDED", "MODIFIED", "DELETED"):
                    self._apply(str(kind), obj)
                if self._stop.is_set():
                    break
        finally:
            events.close()  # the connection goes back to the pool
        return version

    def _apply(self, kind: str, obj: Obj) -> None:
        kept = self._keep(obj)
        key = key_of(obj)
        with self._lock:
            before = self._objects.pop(key, None)
            if kept is not None and kind != "DELETED":
                self._objects[key] = kept
        if kept is not None and kind != "DELETED":
            self._tell(kind, kept)
        elif before is not None:
            self._tell("DELETED", before)

    def _tell(self, kind: str, obj: Obj) -> None:
        if self.on_event is None:
            return
        try:
            self.on_event(kind, obj)
        except Exception as e:  # a handler's bug must not stop the watch
            log.error("watch handler failed", watch=self.name, key="/".join(key_of(obj)),
                      error=clip(str(e), 300))  # fmt: skip
