"""The webhook's catalog from a real HTTP API server stand-in: a bad device in one node's slice leaves every
other product and profile in the catalog, and is logged at warning once, bounded."""

from __future__ import annotations

import json
import threading
from collections.abc import Iterator, MutableMapping
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.kube import MAX_SKIPS_LOGGED, Kube
from admission.main import Webhook
from dra_driver.io.api_client import api_client
from tests.support.catalog_slices import EXPECTED, GOOD, H100, L4, device, slice_of

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


class ApiServer:
    """Answers LIST ResourceSlices with `items`, over a real socket."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                if self.path.split("?")[0] != SLICES_PATH:
                    self.send_error(404)
                    return
                body = json.dumps({"kind": "ResourceSliceList", "items": outer.items}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
        self.thread = threading.Thread(target=self.server.serve_forever, daemon=True)
        self.thread.start()

    @property
    def url(self) -> str:
        return f"http://127.0.0.1:{self.server.server_address[1]}"

    def stop(self) -> None:
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def server() -> Iterator[ApiServer]:
    s = ApiServer()
    yield s
    s.stop()


@pytest.fixture
def webhook(server: ApiServer, tmp_path: Path) -> Webhook:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        json.dumps(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "c", "cluster": {"server": server.url}}],
                "users": [{"name": "u", "user": {"token": "t"}}],
                "contexts": [{"name": "x", "context": {"cluster": "c", "user": "u"}}],
                "current-context": "x",
            }
        )
    )
    return Webhook(Options(known_products()), Kube(api_client(kubeconfig)))


def skipped_warnings(logs: list[MutableMapping[str, Any]]) -> list[MutableMapping[str, Any]]:
    return [e for e in logs if e["log_level"] == "warning" and "left out of the catalog" in e["event"]]


def test_a_malformed_profile_leaves_every_other_product_and_is_logged_once(
    server: ApiServer, webhook: Webhook
) -> None:
    evil = slice_of("node-evil-gpu", device("gpu-0-mig-x", "mig", H100, "5Gi", "xg.5gb"))
    server.items = [evil, GOOD, L4]
    with capture_logs() as logs:
        webhook.refresh_catalog()  # as at start-up: nothing raised
        webhook.refresh_catalog()  # the next refresh: the same entry is not logged again
    assert webhook.options.catalog.products == EXPECTED
    [warning] = skipped_warnings(logs)
    assert warning["slice"] == "node-evil-gpu" and warning["device"] == "gpu-0-mig-x"
    assert warning["field"] == "attributes[gpu.tessera.dev/profile]"
    assert "'xg.5gb' is not of the form <N>g.<M>gb[+me]" in warning["why"]

    worse = slice_of("node-evil-gpu", *evil["spec"]["devices"], device("y", "gpu", 1))
    server.items = [worse, GOOD, L4]
    with capture_logs() as logs:
        webhook.refresh_catalog()
    assert [w["device"] for w in skipped_warnings(logs)] == ["y"]  # only what changed
    assert webhook.options.catalog.products == EXPECTED


def test_many_bad_devices_are_logged_bounded_and_clipped(server: ApiServer, webhook: Webhook) -> None:
    bad = [device(f"d{i}", "gpu", "\x1b" + "N" * 100_000) for i in range(MAX_SKIPS_LOGGED + 30)]
    server.items = [slice_of("node-evil-gpu", *bad), GOOD, L4]
    with capture_logs() as logs:
        webhook.refresh_catalog()
    assert webhook.options.catalog.products == EXPECTED
    warnings = skipped_warnings(logs)
    assert len(warnings) == MAX_SKIPS_LOGGED + 1 and warnings[-1]["count"] == 30
    assert all(len(json.dumps(w)) < 1000 for w in warnings)
