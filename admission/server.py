"""The webhook's HTTPS server: POST /mutate takes AdmissionReviews; GET /healthz, /readyz for probes.

Standard library only (http.server, ssl): each connection is wrapped with the TLS context current when it
is accepted, so a renewed certificate is served from the next connection on without a restart; the TLS
handshake runs in the connection's own thread, so a slow client holds up no one else.
"""

from __future__ import annotations

import json
import socket
import ssl
import tempfile
import threading
from collections.abc import Callable, Mapping
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import structlog

from admission.certs import KeyPair
from dra_driver.values.errors import ConfigError

log = structlog.get_logger()
MAX_BODY = 3 * 1024 * 1024  # the API server sends at most a Pod; etcd's object limit is 1.5 MiB
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

    def __init__(self, address: tuple[str, int], tls: Tls, answer: Answer) -> None:
        self.tls, self.answer = tls, answer
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

    def handle_error(self, request: Any, client_address: Any) -> None:
        # a client that hangs up or fails the handshake: nothing to print a traceback for
        log.debug("connection failed", client=str(client_address))


class _Handler(BaseHTTPRequestHandler):
    server: _Server
    protocol_version = "HTTP/1.1"  # keep-alive: the API server reuses connections

    def setup(self) -> None:
        super().setup()
        self.connection.settimeout(10)

    def log_message(self, format: str, *args: Any) -> None:
        return  # requests are logged by admit's caller, not as access lines on stderr

    def _send(self, status: HTTPStatus, body: bytes, content_type: str = "application/json") -> None:
        # headers and body in one write: two small writes wait on the client's delayed ACK (40 ms)
        head = (
            f"{self.protocol_version} {status.value} {status.phrase}\r\n"
            f"Content-Type: {content_type}\r\nContent-Length: {len(body)}\r\n\r\n"
        )
        self.wfile.write(head.encode("ascii") + body)

    def do_GET(self) -> None:
        if self.path == "/healthz":
            self._send(HTTPStatus.OK, b"ok\n", "text/plain")
        elif self.path == "/readyz":
            ready = self.server.tls.ready
            self._send(HTTPStatus.OK if ready else HTTPStatus.SERVICE_UNAVAILABLE, b"ok\n", "text/plain")
        else:
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")

    def do_POST(self) -> None:
        if self.path.split("?", 1)[0] != "/mutate":
            self._send(HTTPStatus.NOT_FOUND, b"not found\n", "text/plain")
            return
        try:
            length = int(self.headers.get("Content-Length") or "0")
        except ValueError:
            length = -1
        if not 0 < length <= MAX_BODY:
            self._send(HTTPStatus.BAD_REQUEST, b'{"error": "a JSON AdmissionReview body is required"}')
            return
        try:
            review = json.loads(self.rfile.read(length))
        except ValueError:
            self._send(HTTPStatus.BAD_REQUEST, b'{"error": "the body is not JSON"}')
            return
        if not isinstance(review, Mapping):
            self._send(HTTPStatus.BAD_REQUEST, b'{"error": "the body is not an AdmissionReview"}')
            return
        answer = self.server.answer(review)
        self._send(HTTPStatus.OK, json.dumps(answer, separators=(",", ":")).encode())


class WebhookServer:
    """Serves in a thread until `stop`."""

    def __init__(self, host: str, port: int, tls: Tls, answer: Answer) -> None:
        self._server = _Server((host, port), tls, answer)
        self._thread = threading.Thread(target=self._server.serve_forever, name="webhook-https", daemon=True)

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("webhook serving", port=self.port)

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()
        self._thread.join(timeout=5)
