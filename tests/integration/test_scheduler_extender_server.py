"""The extender's HTTP edge over a real socket: an answer for a good body, 400 for a bad one, 500 (never a
dropped connection) when scoring fails, and the counts on /stats."""

from __future__ import annotations

import json
import urllib.error
import urllib.request
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from scheduler_extender.prioritize import Verb
from scheduler_extender.server import ExtenderServer


def _answer(verb: Verb, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    if args.get("Pod") == "boom":
        raise RuntimeError("a bug")
    return [{"Host": n, "Score": 7 if verb == "prioritize" else 3} for n in args["NodeNames"]]


@pytest.fixture
def server() -> Iterator[ExtenderServer]:
    s = ExtenderServer("127.0.0.1", 0, _answer, ready=lambda: True)
    s.start()
    yield s
    s.stop()


def _post(port: int, path: str, body: bytes) -> tuple[int, Any]:
    request = urllib.request.Request(f"http://127.0.0.1:{port}{path}", data=body, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=10) as answer:
            return answer.status, json.loads(answer.read())
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def _get(port: int, path: str) -> tuple[int, bytes]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=10) as answer:
            return answer.status, answer.read()
    except urllib.error.HTTPError as e:
        return e.code, e.read()


def test_prioritize_answers_and_refuses_and_counts(server: ExtenderServer) -> None:
    port = server.port
    assert _post(port, "/prioritize", json.dumps({"Pod": {}, "NodeNames": ["a"]}).encode()) == (
        200,
        [{"Host": "a", "Score": 7}],
    )
    # the second verb, as kube-scheduler's second extender stanza calls it (urlPrefix + "/" + verb)
    assert _post(port, "/fill", json.dumps({"Pod": {}, "NodeNames": ["a"]}).encode()) == (
        200,
        [{"Host": "a", "Score": 3}],
    )
    status, body = _post(port, "/prioritize", b"{not json")
    assert status == 400 and b"not JSON" in body
    status, body = _post(port, "/prioritize", b"[1]")
    assert status == 400 and b"not an ExtenderArgs" in body
    status, body = _post(port, "/prioritize", json.dumps({"Pod": "boom", "NodeNames": []}).encode())
    assert status == 500 and b"failed on this pod" in body
    status, body = _post(port, "/filter", b"{}")
    assert status == 404 and b"/prioritize and /fill" in body
    assert _get(port, "/healthz") == (200, b"ok\n")
    assert _get(port, "/readyz") == (200, b"ok\n")
    status, stats = _get(port, "/stats")
    assert status == 200 and json.loads(stats) == {"prioritized": 1, "filled": 1, "refused": 2, "failed": 1}
