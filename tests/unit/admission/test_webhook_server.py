"""The HTTPS server: AdmissionReviews over TLS, probes, a renewed certificate served without a restart; and
what a hostile client can make of it: bounded connections, a deadline per request, 400s for bad bodies."""

import datetime as dt
import http.client
import json
import socket
import ssl
import threading
import time
from collections.abc import Iterator, Mapping
from typing import Any

import pytest
import structlog

from admission.certs import Bundle, make_serving, renew
from admission.server import MAX_CONNECTIONS, MAX_PER_CLIENT, Tls, WebhookServer

NOW = dt.datetime.now(dt.UTC)


@pytest.fixture
def served() -> Iterator[tuple[WebhookServer, Tls, Bundle]]:
    bundle = renew(None, ["127.0.0.1"], NOW)
    assert bundle is not None
    tls = Tls()
    tls.load(bundle.serving)

    def answer(review: Mapping[str, Any]) -> dict[str, Any]:
        return {"response": {"uid": review["request"]["uid"], "allowed": True}}

    server = WebhookServer("127.0.0.1", 0, tls, answer)
    server.start()
    yield server, tls, bundle
    server.stop()


def connect(server: WebhookServer, ca_pem: bytes) -> http.client.HTTPSConnection:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    return http.client.HTTPSConnection("127.0.0.1", server.port, context=context, timeout=5)


def test_posts_are_answered_over_tls(served: tuple[WebhookServer, Tls, Bundle]) -> None:
    server, _, bundle = served
    conn = connect(server, bundle.ca.cert_pem)
    for uid in ("a", "b"):  # one kept-alive connection, as the API server uses
        conn.request("POST", "/mutate", body=json.dumps({"request": {"uid": uid}}))
        response = conn.getresponse()
        assert response.status == 200 and json.loads(response.read())["response"]["uid"] == uid
    conn.request("GET", "/readyz")
    assert conn.getresponse().status == 200


def test_bad_bodies_are_400(served: tuple[WebhookServer, Tls, Bundle]) -> None:
    server, _, bundle = served
    conn = connect(server, bundle.ca.cert_pem)
    conn.request("POST", "/mutate", body=b"{not json")
    assert conn.getresponse().status == 400


def test_an_untrusted_client_view_fails_and_the_server_keeps_serving(
    served: tuple[WebhookServer, Tls, Bundle],
) -> None:
    server, _, bundle = served
    other = renew(None, ["127.0.0.1"], NOW)
    assert other is not None
    with pytest.raises(ssl.SSLError):
        connect(server, other.ca.cert_pem).request("GET", "/healthz")
    conn = connect(server, bundle.ca.cert_pem)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200


def test_a_renewed_certificate_is_served_from_the_next_connection(
    served: tuple[WebhookServer, Tls, Bundle],
) -> None:
    server, tls, bundle = served
    fresh = make_serving(bundle.ca, ["127.0.0.1"], NOW)
    tls.load(fresh)
    conn = connect(server, bundle.ca.cert_pem)
    conn.request("GET", "/healthz")
    assert conn.getresponse().status == 200
    assert conn.sock is not None
    served_der = conn.sock.getpeercert(binary_form=True)
    assert served_der == ssl.PEM_cert_to_DER_cert(fresh.cert_pem.decode())


# ---- what anyone who reaches the port can do (docs/security.md, "What the webhook trusts") ----------------


@pytest.fixture
def strict() -> Iterator[tuple[WebhookServer, Bundle, list[Mapping[str, Any]]]]:
    """A server with a 1 s request deadline whose answer function fails on a review asking it to."""
    bundle = renew(None, ["127.0.0.1"], NOW)
    assert bundle is not None
    tls = Tls()
    tls.load(bundle.serving)
    seen: list[Mapping[str, Any]] = []

    def answer(review: Mapping[str, Any]) -> dict[str, Any]:
        seen.append(review)
        if review["request"].get("uid") == "boom":
            raise KeyError("a bug")
        return {"response": {"uid": review["request"]["uid"], "allowed": True}}

    server = WebhookServer("127.0.0.1", 0, tls, answer, deadline_s=1.0)
    server.start()
    yield server, bundle, seen
    server.stop()


def _post(conn: http.client.HTTPSConnection, body: bytes) -> tuple[int, bytes]:
    conn.request("POST", "/mutate", body=body)
    response = conn.getresponse()
    return response.status, response.read()


@pytest.mark.parametrize(
    ("body", "reason"),
    [
        (b"{not json", "not JSON"),
        (b"\xff\xfe\x00garbage", "not JSON"),
        (b"[" * 100_000 + b"]" * 100_000, "not JSON"),
        (b'["a list"]', "not an AdmissionReview"),
        (b'{"request": "x"}', "not an AdmissionReview"),
    ],
    ids=["broken", "not-utf8", "deep", "a-list", "no-request"],
)
def test_malformed_bodies_are_400_with_one_bounded_log_line(
    strict: tuple[WebhookServer, Bundle, list[Mapping[str, Any]]], body: bytes, reason: str
) -> None:
    server, bundle, seen = strict
    with structlog.testing.capture_logs() as logged:
        status, answer = _post(connect(server, bundle.ca.cert_pem), body)
    assert status == 400 and reason in json.loads(answer)["error"] and seen == []
    (line,) = [e for e in logged if e["event"] == "malformed review refused"]
    assert line["log_level"] == "info" and reason in line["reason"] and len(str(line)) < 600


def test_a_review_the_webhook_fails_on_is_answered_500_and_logged(
    strict: tuple[WebhookServer, Bundle, list[Mapping[str, Any]]],
) -> None:
    server, bundle, _ = strict
    conn = connect(server, bundle.ca.cert_pem)
    with structlog.testing.capture_logs() as logged:
        status, _ = _post(conn, json.dumps({"request": {"uid": "boom"}}).encode())
    assert status == 500 and any(e["event"] == "review failed" for e in logged)
    assert _post(conn, json.dumps({"request": {"uid": "ok"}}).encode())[0] == 200  # the connection lives on


def _raw(address: str, port: int) -> socket.socket:
    sock = socket.socket()
    sock.bind((address, 0))
    sock.connect(("127.0.0.1", port))
    return sock


def _closed_within(sock: socket.socket, seconds: float) -> bool:
    """Whether the server closes `sock` within `seconds` (what it sends before, if anything, is read)."""
    sock.settimeout(seconds)
    try:
        while sock.recv(4096):
            pass
    except TimeoutError:
        return False
    except OSError:
        return True
    return True


def test_a_slow_loris_is_closed_at_the_request_deadline_however_slowly_it_writes(
    strict: tuple[WebhookServer, Bundle, list[Mapping[str, Any]]],
) -> None:
    server, bundle, _ = strict
    # after the handshake: a request line dribbled a byte per 0.3 s (socket timeouts of 10 s never fire)
    context = ssl.create_default_context(cadata=bundle.ca.cert_pem.decode())
    tls = context.wrap_socket(_raw("127.0.0.1", server.port), server_hostname="127.0.0.1")
    started = time.monotonic()
    with pytest.raises((ssl.SSLError, OSError)):
        for byte in b"POST /mutate HTTP/1.1\r\nContent-Length: 100\r\n\r\n" + b"{" * 100:
            tls.send(bytes([byte]))
            time.sleep(0.3)
            if time.monotonic() - started > 5:
                break
        if not tls.recv(1):  # closed cleanly: recv gives b""
            raise OSError("closed")
    assert time.monotonic() - started < 3
    # before the handshake: a ClientHello a byte at a time
    plain = _raw("127.0.0.1", server.port)
    started = time.monotonic()
    plain.send(b"\x16")
    assert _closed_within(plain, 3) and time.monotonic() - started < 3


def test_an_idle_keep_alive_connection_closes_quietly_a_half_request_does_not(
    strict: tuple[WebhookServer, Bundle, list[Mapping[str, Any]]],
) -> None:
    server, bundle, _ = strict
    with structlog.testing.capture_logs() as logged:
        conn = connect(server, bundle.ca.cert_pem)
        assert _post(conn, json.dumps({"request": {"uid": "a"}}).encode())[0] == 200
        time.sleep(1.5)  # past the deadline: the server closes the idle connection
        context = ssl.create_default_context(cadata=bundle.ca.cert_pem.decode())
        half = context.wrap_socket(_raw("127.0.0.1", server.port), server_hostname="127.0.0.1")
        half.send(b"POST /mutate HTTP/1.1\r\n")
        assert _closed_within(half, 3)
    refused = [e for e in logged if e["event"] == "request refused"]
    assert [e["log_level"] for e in refused if e["log_level"] != "debug"] == ["info"]  # the half request


def test_connections_past_the_cap_are_closed_at_once_and_take_no_thread(
    served: tuple[WebhookServer, Tls, Bundle],
) -> None:
    server, _, bundle = served  # the default deadline (10 s): the held connections stay until closed
    threads = threading.active_count()
    # a slow-loris of 400 idle connections from 13 addresses: 32 at most from each, 128 in all
    held = [_raw(f"127.0.0.{2 + i // 31}", server.port) for i in range(400)]
    time.sleep(0.5)
    assert server.open_connections == MAX_CONNECTIONS
    assert threading.active_count() <= threads + MAX_CONNECTIONS
    assert _closed_within(_raw("127.0.0.200", server.port), 0.5)
    assert not _closed_within(held[0], 0.2)
    for s in held:
        s.close()
    deadline = time.monotonic() + 10
    while server.open_connections and time.monotonic() < deadline:
        time.sleep(0.05)
    assert server.open_connections == 0
    # one address gets MAX_PER_CLIENT: one client cannot take every slot from the API server
    one_address = [_raw("127.0.0.201", server.port) for _ in range(MAX_PER_CLIENT + 1)]
    assert _closed_within(one_address[-1], 0.5) and not _closed_within(one_address[0], 0.2)
    assert (
        _post(connect(server, bundle.ca.cert_pem), json.dumps({"request": {"uid": "a"}}).encode())[0] == 200
    )
    for s in one_address:
        s.close()
