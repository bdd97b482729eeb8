"""The daemon's HTTP endpoint: `/metrics` (Prometheus text format) and `/healthz`.

`--metrics-address HOST:PORT` (`:9400` = every interface, the chart's default; empty = no endpoint). A scrape
runs in its own thread of a threading HTTP server, so a slow scraper never holds up prepare.
"""

from __future__ import annotations

import threading
from collections.abc import Callable
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

import structlog
from prometheus_client import CONTENT_TYPE_LATEST

from dra_driver.errors import ConfigError

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
    def __init__(self, *, address: str, render: Render, healthz: Healthz) -> None:
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

        try:
            self._server = ThreadingHTTPServer((host, port), Handler)
        except OSError as e:
            raise ConfigError(f"--metrics-address {address!r}: cannot listen ({e.strerror or e})") from e
        self._server.daemon_threads = True
        self._thread: threading.Thread | None = None

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics-http", daemon=True)
        self._thread.start()
        log.info("metrics endpoint listening", port=self.port)

    def stop(self) -> None:
        if self._thread is not None:
            self._server.shutdown()
            self._thread.join(timeout=5)
        self._server.server_close()
