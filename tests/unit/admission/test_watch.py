"""The list+watch view: pages listed, events applied, a 410 or a broken stream listed again (what vanished
meanwhile reported as deleted), a failing handler never stops it. The responses are scripted as the API
server's list bodies and watch events; tests/integration/test_rest_calls.py checks the calls beneath on a real
socket, e2e runs the webhook against a real API server."""

import queue
import threading
from collections.abc import Generator
from typing import Any

from admission.watch import Watched


def obj(name: str, version: str, namespace: str = "ns", **extra: Any) -> dict[str, Any]:
    return {"metadata": {"name": name, "namespace": namespace, "resourceVersion": version}, **extra}


class Server:
    """Answers the view from a script: pages (`page`) and watches (`events`: a list of events, or an
    exception to raise); blocks once the script is done, like a watch with nothing to say. `calls` records
    each call: ("page", token) or ("watch", version)."""

    def __init__(self) -> None:
        self.calls: list[tuple[str, str | None]] = []
        self.script: queue.Queue[Any] = queue.Queue()

    def _next(self) -> Any:
        step = self.script.get()
        if isinstance(step, Exception):
            raise step
        return step

    def page(self, *, limit: int, token: str | None) -> dict[str, Any]:
        self.calls.append(("page", token))
        body: dict[str, Any] = self._next()
        return body

    def events(self, *, version: str, timeout_s: int) -> Generator[dict[str, Any], None, None]:
        self.calls.append(("watch", version))
        yield from self._next()


def page(items: list[dict[str, Any]], version: str, cont: str | None = None) -> dict[str, Any]:
    return {"items": items, "metadata": {"resourceVersion": version, **({"continue": cont} if cont else {})}}


def events(*pairs: tuple[str, dict[str, Any]]) -> list[dict[str, Any]]:
    return [{"type": t, "object": o} for t, o in pairs]


def started(server: Server, seen: list[tuple[str, str]], **kwargs: Any) -> Watched:
    def keep(o: Any) -> Any:
        return None if o["metadata"]["name"].startswith("skip") else o

    view = Watched(name="test", source=server, keep=keep, backoff_s=0.01, **kwargs)
    view.on_event = lambda kind, o: seen.append((kind, o["metadata"]["name"]))
    view.start()
    return view


def wait(condition: Any) -> None:
    done = threading.Event()
    for _ in range(500):
        if condition():
            return
        done.wait(0.01)
    raise AssertionError("not reached")


def test_pages_then_events_and_what_keep_drops_is_never_seen() -> None:
    server, seen = Server(), list[tuple[str, str]]()
    server.script.put(page([obj("a", "1"), obj("skip-me", "1")], "5", cont="next"))
    server.script.put(page([obj("b", "4")], "9"))
    server.script.put(
        events(
            ("ADDED", obj("c", "10")),
            ("BOOKMARK", {"metadata": {"resourceVersion": "12"}}),
            ("MODIFIED", obj("a", "13", spec={"x": 1})),
            ("ADDED", obj("skip-2", "14")),
            ("DELETED", obj("b", "15")),
        )
    )
    view = started(server, seen)
    wait(lambda: len(seen) == 5)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("ADDED", "c"), ("MODIFIED", "a"), ("DELETED", "b")]
    assert (
        view.synced and view.get("ns", "a") == obj("a", "13", spec={"x": 1}) and view.get("ns", "b") is None
    )
    assert view.get("ns", "skip-me") is None and sorted(o["metadata"]["name"] for o in view.items()) == [
        "a",
        "c",
    ]
    assert server.calls[:2] == [("page", None), ("page", "next")]
    wait(lambda: len(server.calls) == 4)
    assert server.calls[2:] == [("watch", "9"), ("watch", "15")]  # the stream ended: resumed where it was
    view.stop()


def test_an_expired_watch_or_a_broken_one_lists_again_and_reports_what_vanished() -> None:
    server, seen = Server(), list[tuple[str, str]]()
    server.script.put(page([obj("a", "1"), obj("b", "1")], "2"))
    server.script.put(events(("ERROR", {"code": 410, "message": "too old"})))
    server.script.put(page([obj("b", "3", spec={"y": 2})], "3"))
    server.script.put(ConnectionError("the API server is away"))
    server.script.put(page([obj("b", "3", spec={"y": 2}), obj("c", "4")], "4"))
    view = started(server, seen)
    wait(lambda: len(seen) == 5)
    assert seen == [("ADDED", "a"), ("ADDED", "b"), ("DELETED", "a"), ("MODIFIED", "b"), ("ADDED", "c")]
    assert [kind for kind, _ in server.calls[:5]] == ["page", "watch", "page", "watch", "page"]
    view.stop()


def test_a_handler_that_fails_does_not_stop_the_view() -> None:
    server = Server()
    server.script.put(page([obj("a", "1")], "1"))
    server.script.put(events(("ADDED", obj("b", "2")), ("ADDED", obj("c", "3"))))
    view = Watched(name="test", source=server, keep=lambda o: o)

    def handler(kind: str, o: Any) -> None:
        if o["metadata"]["name"] == "b":
            raise KeyError("a bug")

    view.on_event = handler
    view.start()
    wait(lambda: view.get("ns", "c") is not None)
    view.stop()
