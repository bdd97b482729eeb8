"""The HTTP endpoint of the node daemon and of the admission webhook: `/metrics` (Prometheus text format) and
`/healthz`.

`--metrics-address HOST:PORT` (the chart's defaults `:9400` for the plugin, `:9401` for the webhook = every
interface; empty = no endpoint). A scrape
runs in its own thread of a threading HTTP server, so a slow scraper never holds up prepare.

In the host's network (the chart's hostNetwork), the instance a rolling update starts beside the old one finds
the port taken until the old one exits: it then keeps trying in the background instead of failing to start,
since a plugin that cannot start would never become Ready and the old one would never be replaced.
"""

from __future__ import annotations

import errno
import threading
import time
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CONTENT_TYPE_LATEST

from dra_driver.vocabulary.errors import ConfigError

log = structlog.get_logger(__name__)

Healthz = Callable[[], str | None]  # None: healthy; else why not
Render = Callable[[], bytes]  # the exposition text of one scrape


def parse_address(text: str) -> tuple[str, int]:
    """`HOST:PORT`, `:PORT` (every interface) or `[IPv6]:PORT` → (host, port); ConfigError naming the flag."""
    host, sep, port = text.rpartition(":")
    if not sep or not port.isdigit() or not 0 <= int(port) <= 65535:
        raise ConfigError(
            f"--metrics-address {text!r}: expected HOST:PORT or :PORT (e.g. :9400, 127.0.0.1:9400); "
            "give an empty string to turn the endpoint off"
        )
    return host.strip("[]"), int(port)


class MetricsServer:
    def __init__(self, *, address: str, render: Render, healthz: Healthz, retry_s: float = 2.0) -> None:
        host, port = parse_address(address)
        make, check = render, healthz

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?", 1)[0]
                if path == "/metrics":
                    self._reply(200, CONTENT_TYPE_LATEST, make())
                elif path == "/healthz":
                    why = check()
                    body = b"ok\n" if why is None else f"unhealthy: {why}\n".encode()
                    self._reply(200 if why is None else 503, "text/plain; charset=utf-8", body)
                else:
                    self._reply(404, "text/plain; charset=utf-8", b"not found: try /metrics or /healthz\n")

            def _reply(self, code: int, content_type: str, body: bytes) -> None:
                self.send_response(code)
                self.send_header("Content-Type", content_type)
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, format: str, *args: object) -> None:
                log.debug("metrics.request", line=format % args)

        self._address, self._host, self._port, self._handler = address, host, port, Handler
        self._server: ThreadingHTTPServer | None = None
        self._thread: threading.Thread | None = None
        self._lock = threading.Lock()
        self._stopped = False
        self._serving = False
        self._retry_s = retry_s
        if not self._bind():
            log.warning("metrics port in use; retrying in the background", address=address)

    def _bind(self) -> bool:
        """Listen; False while another process holds the port, ConfigError for anything else."""
        try:
            server = ThreadingHTTPServer((self._host, self._port), self._handler)
        except OSError as e:
            if e.errno == errno.EADDRINUSE:
                return False
            where = f"--metrics-address {self._address!r}"
            raise ConfigError(f"{where}: cannot listen ({e.strerror or e})") from e
        server.daemon_threads = True
        self._server = server
        return True

    @property
    def port(self) -> int:
        return int(self._server.server_address[1]) if self._server is not None else self._port

    @property
    def listening(self) -> bool:
        return self._server is not None

    def start(self) -> None:
        self._thread = threading.Thread(target=self._serve, name="metrics-http", daemon=True)
        self._thread.start()

    def _serve(self) -> None:
        while True:
            with self._lock:
                if self._stopped:
                    return
                server = self._server
                if server is not None:
                    self._serving = True
                    break
            time.sleep(self._retry_s)
            with self._lock:
                if self._stopped:
                    return
                try:
                    self._bind()
                except ConfigError as e:
                    log.error("metrics endpoint cannot listen", error=str(e))
                    return
        log.info("metrics endpoint listening", port=self.port)
        server.serve_forever()

    def stop(self) -> None:
        with self._lock:
            self._stopped = True
            serving = self._serving
        if self._server is not None:
            if serving:
                self._server.shutdown()
            self._server.server_close()
        if self._thread is not None:
            self._thread.join(timeout=5)
