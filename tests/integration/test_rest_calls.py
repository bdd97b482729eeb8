"""RestCalls against a local HTTP server that answers as the API server would: the request it sees (method,
path, query, headers, body) and the errors and watch events the caller gets back."""

from __future__ import annotations

import http.server
import json
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from admission.watch import ApiSource
from dra_driver.io.api_objects import path
from dra_driver.io.rest_calls import JSON_PATCH, MAX_LINE, RestCalls
from tests.support.loopback import serving

Seen = list[dict[str, Any]]


class ApiServer(http.server.BaseHTTPRequestHandler):
    seen: Seen

    def _answer(self) -> None:
        length = int(self.headers.get("Content-Length") or 0)
        body = json.loads(self.rfile.read(length)) if length else None
        self.seen.append(
            {
                "method": self.command,
                "path": self.path,
                "type": self.headers.get("Content-Type"),
                "body": body,
            }
        )
        if "/html" in self.path:
            raw = b"<html>a proxy's page</html>"
            self.send_response(200)
            self.send_header("Content-Length", str(len(raw)))
            self.end_headers()
            self.wfile.write(raw)
        elif "/list" in self.path:
            self._send(200, [1, 2])
        elif "/missing" in self.path:
            self._send(404, {"kind": "Status", "code": 404, "reason": "NotFound"})
        elif "watch=true" in self.path and "/huge" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(b'{"type": "ADDED", "object": {"n": 1}}\n')
            self.wfile.write(b'{"type": "ADDED", "object": {"pad": "' + b"x" * (MAX_LINE + 10))
        elif "watch=true" in self.path:
            self.send_response(200)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            for n in (1, 2):
                self.wfile.write(json.dumps({"type": "ADDED", "object": {"n": n}}).encode() + b"\n\n")
        else:
            self._send(200, {"echo": body, "path": self.path})

    def _send(self, code: int, data: object) -> None:
        raw = json.dumps(data).encode()
        self.send_response(code)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(raw)))
        self.end_headers()
        self.wfile.write(raw)

    do_GET = do_POST = do_PUT = do_PATCH = do_DELETE = _answer  # noqa: N815 (the names http.server calls)

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[tuple[RestCalls, Seen]]:
    seen: Seen = []
    handler = type("Handler", (ApiServer,), {"seen": seen})
    with serving(handler) as port:
        configuration = k8s.Configuration(host=f"http://127.0.0.1:{port}")
        yield RestCalls(k8s.ApiClient(configuration)), seen


def test_each_verb_sends_its_path_query_and_json_body(server: tuple[RestCalls, Seen]) -> None:
    rest, seen = server
    pod = path("/api/v1/namespaces/{namespace}/pods/{name}", namespace="ns", name="a/b")
    assert pod == "/api/v1/namespaces/ns/pods/a%2Fb"
    assert rest.get("/api/v1/pods", fieldSelector="spec.nodeName=n1", limit=None)["path"] == (
        "/api/v1/pods?fieldSelector=spec.nodeName%3Dn1"
    )
    assert rest.create("/api/v1/namespaces/ns/events", {"reason": "X"})["echo"] == {"reason": "X"}
    rest.patch(pod + "/status", {"status": {"phase": "Running"}})
    rest.delete(pod, {"gracePeriodSeconds": 0})
    assert [(s["method"], s["type"]) for s in seen] == [
        ("GET", None),
        ("POST", "application/json"),
        ("PATCH", "application/merge-patch+json"),
        ("DELETE", "application/json"),
    ]
    assert seen[2]["body"] == {"status": {"phase": "Running"}} and seen[3]["body"] == {
        "gracePeriodSeconds": 0
    }


def test_a_status_outside_2xx_is_the_librarys_api_exception(server: tuple[RestCalls, Seen]) -> None:
    rest, _ = server
    with pytest.raises(ApiException) as caught:
        rest.get("/api/v1/namespaces/ns/pods/missing")
    assert caught.value.status == 404 and "NotFound" in str(caught.value.body)


def test_a_watch_yields_its_events_and_ends_with_the_stream(server: tuple[RestCalls, Seen]) -> None:
    rest, seen = server
    events = list(rest.watch("/api/v1/pods", timeout_s=5, resourceVersion="7"))
    assert events == [{"type": "ADDED", "object": {"n": 1}}, {"type": "ADDED", "object": {"n": 2}}]
    assert "watch=true" in seen[0]["path"] and "timeoutSeconds=5" in seen[0]["path"]
    assert "resourceVersion=7" in seen[0]["path"]


def test_an_answer_that_is_no_json_object_is_an_api_exception(server: tuple[RestCalls, Seen]) -> None:
    rest, _ = server
    with pytest.raises(ApiException) as caught:
        rest.get("/api/v1/nodes/html")
    assert caught.value.status == 200 and "not JSON" in str(caught.value.reason)
    with pytest.raises(ApiException, match="a JSON list, not an object"):
        rest.get("/api/v1/nodes/list")


def test_a_replace_puts_and_a_list_patch_goes_as_json_patch(server: tuple[RestCalls, Seen]) -> None:
    rest, seen = server
    rest.replace("/api/v1/namespaces/ns/secrets/s", {"metadata": {"resourceVersion": "3"}})
    operations = [{"op": "add", "path": "/webhooks/0/clientConfig/caBundle", "value": "Y2E="}]
    rest.patch("/apis/admissionregistration.k8s.io/v1/mutatingwebhookconfigurations/w", operations,
               content_type=JSON_PATCH)  # fmt: skip
    assert [(s["method"], s["type"], s["body"]) for s in seen] == [
        ("PUT", "application/json", {"metadata": {"resourceVersion": "3"}}),
        ("PATCH", "application/json-patch+json", operations),
    ]


def test_a_watch_event_over_the_bound_ends_the_watch_after_the_ones_before(
    server: tuple[RestCalls, Seen],
) -> None:
    rest, _ = server
    events = rest.watch("/api/v1/pods/huge", timeout_s=5)
    assert next(events) == {"type": "ADDED", "object": {"n": 1}}
    with pytest.raises(ApiException, match=f"longer than {MAX_LINE} bytes"):
        next(events)


def test_a_watched_source_pages_with_the_token_and_watches_from_the_version(
    server: tuple[RestCalls, Seen],
) -> None:
    rest, seen = server
    source = ApiSource(rest, "/api/v1/pods", labelSelector="a=b")
    source.page(limit=500, token=None)
    source.page(limit=500, token="next page")
    assert len(list(source.events(version="42", timeout_s=5))) == 2
    first, second, watch = (s["path"] for s in seen)
    assert first == "/api/v1/pods?limit=500&labelSelector=a%3Db"
    assert second == "/api/v1/pods?limit=500&labelSelector=a%3Db&continue=next%20page"
    assert all(q in watch for q in ("labelSelector=a%3Db", "resourceVersion=42", "allowWatchBookmarks=true"))
    assert "watch=true" in watch and "timeoutSeconds=5" in watch
