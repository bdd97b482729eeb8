"""The HTTPS server: AdmissionReviews over TLS, probes, a renewed certificate served without a restart."""

import datetime as dt
import http.client
import json
import ssl
from collections.abc import Iterator, Mapping
from typing import Any

import pytest

from admission.certs import Bundle, make_serving, renew
from admission.server import Tls, WebhookServer

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
