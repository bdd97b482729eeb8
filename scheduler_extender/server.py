"""The extender's HTTP edge: POST /prioritize and POST /fill (prioritize.VERBS) take kube-scheduler's
ExtenderArgs; GET /healthz, /readyz, and /stats (the calls answered per verb, refused and failed, as
JSON).

Standard library only. It holds no state of its own: every answer comes from the ResourceSlices and
ResourceClaims it watches (admission.watch.Watched), so any number of replicas answer alike. kube-scheduler
is configured with `ignorable: true` (deploy/scheduler/kube-scheduler-extender-config.yaml): an extender that
is down, slow or answers an error leaves the pod to the scheduler's own scores, never unscheduled.

A body is bounded (MAX_BODY), a socket read has a timeout, a bad body is answered 400 with the reason.
"""

from __future__ import annotations

import json
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

import structlog

from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import clip
from scheduler_extender.prioritize import VERBS, Verb

log = structlog.get_logger()
MAX_BODY = 8 * 1024 * 1024  # a Pod and up to MAX_NODES names, or a NodeList of a few hundred nodes
READ_TIMEOUT_S = 10.0
# /stats' name for each verb's calls
COUNTED: dict[Verb, str] = {"prioritize": "prioritized", "fill": "filled"}
Answer = Callable[[Verb, Mapping[str, Any]], list[dict[str, Any]]]


class _Server(ThreadingHTTPServer):
    daemon_threads = True

    def __init__(self, address: tuple[str, int], answer: Answer, ready: Callable[[], bool]) -> None:
        super().__init__(address, _Handler)
        self.answer, self.ready = answer, ready
        self.counts = dict.fromkeys((*COUNTED.values(), "refused", "failed"), 0)
        self.lock = threading.Lock()

    def count(self, what: str) -> None:
        with self.lock:
            self.counts[what] += 1


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"
    timeout = READ_TIMEOUT_S

    def log_message(self, format: str, *args: Any) -> None:
        return

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "application/json") -> None:
        self.send_response(status)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        elif self.path == "/stats":  # calls answered, refused (400) and failed (500) since the start
            with self.server.lock:
                body = json.dumps(self.server.counts).encode()
            self._send(HTTPStatus.OK, body)
        elif self.path == "/readyz":
            ready = self.server.ready()
            self._send(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def _refuse(self, reason: str) -> None:
        self.server.count("refused")
        self.close_connection = True
        log.info("extender call refused", client=str(self.client_address[0]), reason=reason)
        self._send(HTTPStatus.BAD_REQUEST, json.dumps({"Error": reason}).encode())

    def do_POST(self) -> None:
        verb = next((v for v in VERBS if v == self.path.rstrip("/").rsplit("/", 1)[-1]), None)
        if verb is None:
            self.close_connection = True
            served = " and ".join(f"/{v}" for v in VERBS)
            message = f"not found: this extender answers {served}\n"
            self._send(HTTPStatus.NOT_FOUND, message.encode(), "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._refuse(
                f"a JSON ExtenderArgs body of 1 to {MAX_BODY} bytes is required, with its Content-Length"
            )
            return
        try:
            args = json.loads(self.rfile.read(length))
        except (ValueError, RecursionError):
            self._refuse("the body is not JSON")
            return
        if not isinstance(args, Mapping):
            self._refuse("the body is not an ExtenderArgs object")
            return
        started = time.perf_counter()
        try:
            answer = self.server.answer(verb, args)
        except ConfigError as e:
            self._refuse(clip(str(e), 300))
            return
        except Exception as e:  # a bug for one pod must not drop the call unanswered
            self.server.count("failed")
            log.warning("prioritize failed", error=clip(repr(e), 300))
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b'{"Error": "the extender failed on this pod"}')
            return
        self.server.count(COUNTED[verb])
        log.debug(verb, nodes=len(answer), ms=round((time.perf_counter() - started) * 1000, 1))
        self._send(HTTPStatus.OK, json.dumps(answer, separators=(",", ":")).encode())


class ExtenderServer:
    """Serves in a thread until `stop`."""

    def __init__(self, host: str, port: int, answer: Answer, *, ready: Callable[[], bool]) -> None:
        self._server = _Server((host, port), answer, ready)
        self._thread = threading.Thread(target=self._server.serve_forever, name="extender-http", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("extender serving", port=self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
