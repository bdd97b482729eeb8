from __future__ import annotations

import http.server
import socket
from collections.abc import Iterator

import pytest

from tests.support.loopback import free_port, free_ports, http_status, serving


class Answers(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path == "/healthz" else 503)
        self.end_headers()

    def log_message(self, format: str, *args: object) -> None:
        pass


@pytest.fixture
def server() -> Iterator[int]:
    with serving(Answers) as port:
        yield port


def test_the_ports_are_distinct_and_free() -> None:
    ports = free_ports(5)
    assert len(set(ports)) == 5
    for port in [*ports, free_port()]:
        with socket.socket() as s:
            s.bind(("127.0.0.1", port))  # raises if something held it


def test_http_status_is_the_answer_or_0_when_nothing_listens(server: int) -> None:
    assert http_status(server, "/healthz") == 200
    assert http_status(server, "/readyz") == 503
    assert http_status(free_port(), "/healthz", timeout_s=1.0) == 0


def test_serving_stops_the_server_when_the_block_ends() -> None:
    with serving(Answers) as port:
        assert http_status(port, "/healthz") == 200
    assert http_status(port, "/healthz", timeout_s=1.0) == 0
