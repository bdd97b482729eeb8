"""The webhook's HTTPS server: POST /mutate takes AdmissionReviews; GET /healthz, /readyz for probes.

Standard library only (http.server, ssl): each connection is wrapped with the TLS context current when it
is accepted, so a renewed certificate is served from the next connection on without a restart; the TLS
handshake runs in the connection's own thread, so a slow client holds up no one else.

Anyone who reaches the port may connect, so everything a connection may take is bounded (docs/security.md,
"What the webhook trusts"): MAX_CONNECTIONS open at once (MAX_PER_CLIENT from one address; one more is
closed at once, before it gets a thread), MAX_BODY bytes a body, and REQUEST_DEADLINE_S for the whole of a
request, handshake and idle wait included, however slowly it trickles in. A body that is not an
AdmissionReview is answered 400 and logged in one bounded line.
"""

from __future__ import annotations

import io
import json
import socket
import ssl
import tempfile
import threading
import time
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from admission.certs import KeyPair
from dra_driver.vocabulary.errors import ConfigError
from dra_driver.vocabulary.excerpt import clip, excerpt

log = structlog.get_logger()
MAX_BODY = 3 * 1024 * 1024  # the API server sends at most a Pod; etcd's object limit is 1.5 MiB
MAX_CONNECTIONS = 128  # open at once; each is a thread
MAX_PER_CLIENT = 32  # from one address: one client cannot take every slot from the API server
REQUEST_DEADLINE_S = 10.0  # from the previous answer (or the accept) to a whole request read
WRITE_TIMEOUT_S = 10.0
Answer = Callable[[Mapping[str, Any]], dict[str, Any]]


class Tls:
    """The serving certificate, swappable while serving."""

    def __init__(self) -> None:
        self._context: ssl.SSLContext | None = None
        self._lock = threading.Lock()

    @property
    def ready(self) -> bool:
        return self._context is not None

    def context(self) -> ssl.SSLContext:
        with self._lock:
            if self._context is None:
                raise ConfigError("the webhook has no serving certificate yet")
            return self._context

    def load_files(self, cert: Path, key: Path) -> None:
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        context.minimum_version = ssl.TLSVersion.TLSv1_2
        try:
            context.load_cert_chain(cert, key)
        except (OSError, ssl.SSLError) as e:
            raise ConfigError(f"cannot load the serving certificate {cert} / {key}: {e}") from e
        with self._lock:
            self._context = context

    def load(self, pair: KeyPair) -> None:
        """Serve `pair` (PEM in memory; ssl reads files, so through a private temporary directory)."""
        with tempfile.TemporaryDirectory(prefix="tessera-webhook-") as tmp:
            cert, key = Path(tmp) / "tls.crt", Path(tmp) / "tls.key"
            cert.write_bytes(pair.cert_pem)
            key.touch(mode=0o600)
            key.write_bytes(pair.key_pem)
            self.load_files(cert, key)


class _Server(ThreadingHTTPServer):
    daemon_threads = True
    request_queue_size = 128

    def __init__(
        self, address: tuple[str, int], tls: Tls, answer: Answer, ready: Callable[[], bool], deadline_s: float
    ) -> None:
        self.tls, self.answer, self.ready, self.deadline_s = tls, answer, ready, deadline_s
        self._open: dict[str, int] = {}  # client address → connections open
        self._open_lock = threading.Lock()
        self._refused, self._refusal_logged = 0, 0.0
        super().__init__(address, _Handler)

    def get_request(self) -> tuple[socket.socket, Any]:
        sock, address = self.socket.accept()
        sock.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        try:
            wrapped = self.tls.context().wrap_socket(sock, server_side=True, do_handshake_on_connect=False)
        except (ConfigError, ssl.SSLError, OSError):
            sock.close()
            raise OSError("no TLS context for a new connection") from None
        return wrapped, address

    @property
    def open_connections(self) -> int:
        with self._open_lock:
            return sum(self._open.values())

    def process_request(self, request: Any, client_address: Any) -> None:
        """A thread for the connection, unless too many are open: then it is closed here and now."""
        client = str(client_address[0]) if isinstance(client_address, tuple) else str(client_address)
        with self._open_lock:
            full = sum(self._open.values()) >= MAX_CONNECTIONS or self._open.get(client, 0) >= MAX_PER_CLIENT
            if not full:
                self._open[client] = self._open.get(client, 0) + 1
        if full:
            self._refuse(client)
            self.shutdown_request(request)
            return
        super().process_request(request, client_address)

    def process_request_thread(self, request: Any, client_address: Any) -> None:
        client = str(client_address[0]) if isinstance(client_address, tuple) else str(client_address)
        try:
            super().process_request_thread(request, client_address)
        finally:
            with self._open_lock:
                left = self._open.get(client, 1) - 1
                if left > 0:
                    self._open[client] = left
                else:
                    self._open.pop(client, None)

    def _refuse(self, client: str) -> None:
        self._refused += 1
        now = time.monotonic()
        if now - self._refusal_logged >= 10:  # one line per 10 s however many are refused
            self._refusal_logged = now
            log.warning("connections refused: too many open", client=client, refused=self._refused,
                        max_connections=MAX_CONNECTIONS, max_per_client=MAX_PER_CLIENT)  # fmt: skip
            self._refused = 0

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up or fails the handshake: nothing to print a traceback for
        log.debug("connection failed", client=str(client_address))


class _Deadline(io.RawIOBase):
    """The connection's reads, each given only the time left until `until`: a request that trickles in a
    byte at a time (or a handshake that does) ends at the deadline, not at a timeout per byte."""

    def __init__(self, sock: socket.socket) -> None:
        self._sock = sock
        self.until = 0.0
        self.received = 0  # bytes of this request so far: none means an idle keep-alive connection

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        left = self.until - time.monotonic()
        if left <= 0:
            raise TimeoutError("the request's deadline passed")
        self._sock.settimeout(left)
        got = self._sock.recv_into(buffer)
        self.received += got
        return got


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses connections

    def setup(self) -> None:
        super().setup()
        self._deadline = _Deadline(self.connection)
        self.rfile = io.BufferedReader(self._deadline)

    def handle_one_request(self) -> None:
        self._deadline.until = time.monotonic() + self.server.deadline_s
        self._deadline.received = 0
        super().handle_one_request()

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are logged by admit's caller, not as access lines on stderr

    def log_error(self, format: str, *args: Any) -> None:
        # a malformed request line or headers, a request past its deadline: one bounded line; an idle
        # keep-alive connection closed at its deadline (the API server's, between reviews) is no news
        level = log.info if self._deadline.received else log.debug
        level("request refused", client=str(self.client_address[0]), reason=clip(format % args, 300))

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "application/json") -> None:
        # headers and body in one write: two small writes wait on the client's delayed ACK (40 ms)
        head = (
            f"{self.protocol_version} {status.value} {status.phrase}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n"
            f"{'Connection: close' + chr(13) + chr(10) if self.close_connection else ''}\r\n"
        )
        self.connection.settimeout(WRITE_TIMEOUT_S)
        self.wfile.write(head.encode("ascii") + body)

    def _malformed(self, reason: str, shown: object = None) -> None:
        """400, the connection closed (what follows a bad body cannot be trusted to be a request)."""
        log.info("malformed review refused", client=str(self.client_address[0]), reason=reason,
                 body=None if shown is None else excerpt(shown))  # fmt: skip
        self.close_connection = True
        self._send(HTTPStatus.BAD_REQUEST, json.dumps({"error": reason}).encode())

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        elif self.path == "/readyz":
            ready = self.server.tls.ready and self.server.ready()
            self._send(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/mutate":
            self.close_connection = True  # its body is left unread
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._malformed(f"a JSON AdmissionReview body of 1 to {MAX_BODY} bytes is required, with its "
                            "Content-Length", self.headers.get("Content-Length"))  # fmt: skip
            return
        body = self.rfile.read(length)
        try:
            review = json.loads(body)
        except (ValueError, RecursionError):
            self._malformed("the body is not JSON", body[:80])
            return
        if not isinstance(review, Mapping) or not isinstance(review.get("request"), Mapping):
            self._malformed("the body is not an AdmissionReview: no request", body[:80])
            return
        try:
            answer = self.server.answer(review)
        except Exception as e:  # a bug for one body must not drop the connection unanswered
            log.warning("review failed", client=str(self.client_address[0]), error=clip(repr(e), 300))
            self._send(HTTPStatus.INTERNAL_SERVER_ERROR, b'{"error": "the webhook failed on this review"}')
            return
        self._send(HTTPStatus.OK, json.dumps(answer, separators=(",", ":")).encode())


class WebhookServer:
    """Serves in a thread until `stop`."""

    def __init__(
        self,
        host: str,
        port: int,
        tls: Tls,
        answer: Answer,
        *,
        ready: Callable[[], bool] = lambda: True,
        deadline_s: float = REQUEST_DEADLINE_S,
    ) -> None:
        """`ready`: besides a certificate, what /readyz waits for (the template watch's first list)."""
        self._server = _Server((host, port), tls, answer, ready, deadline_s)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-https", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    @property
    def open_connections(self) -> int:
        return self._server.open_connections

    def start(self) -> None:
        self._thread.start()
        log.info("webhook serving", port=self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
