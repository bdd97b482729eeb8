"""Loopback networking for tests and benches: free TCP ports, an HTTP server on one for a test's handler,
and the HTTP status a local server answers (what a kubelet's probe would see)."""

from __future__ import annotations

import http.server
import socket
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from contextlib import contextmanager


def free_ports(count: int) -> list[int]:
    """`count` distinct loopback TCP ports nothing listens on now (all bound at once, so none repeats)."""
    sockets = [socket.socket(socket.AF_INET, socket.SOCK_STREAM) for _ in range(count)]
    try:
        for s in sockets:
            s.bind(("127.0.0.1", 0))
        return [int(s.getsockname()[1]) for s in sockets]
    finally:
        for s in sockets:
            s.close()


def free_port() -> int:
    """A loopback TCP port nothing listens on now."""
    return free_ports(1)[0]


def http_status(port: int, path: str, *, timeout_s: float = 5.0) -> int:
    """The status of a GET of `path` on 127.0.0.1:`port`; 0 when nothing answers (refused, reset, late)."""
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=timeout_s) as answer:
            return int(answer.status)
    except urllib.error.HTTPError as e:
        return e.code
    except OSError:
        return 0


@contextmanager
def serving(handler: type[http.server.BaseHTTPRequestHandler]) -> Iterator[int]:
    """`handler` answering on 127.0.0.1 in a thread of its own while the block runs; yields the port."""
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    try:
        yield int(server.server_address[1])
    finally:
        server.shutdown()
        server.server_close()
