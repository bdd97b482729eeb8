"""The version gate against an API server's real /version endpoint (a local HTTP server): the older of
kube-scheduler (the API server's release) and the release NodeSettings `schedulerVersion` names decides
whether a shared family may be published beside the others."""

from __future__ import annotations

import contextlib
import json
from collections.abc import Callable, Iterator
from http.server import BaseHTTPRequestHandler

import pytest
from kubernetes import client as k8s

from dra_driver.core.settings import NodeSettings
from dra_driver.vocabulary.names import Family
from kubelet_plugin.serving.version_gate import gated_settings
from tests.support.loopback import serving

EVERY = frozenset(Family(f) for f in ("gpu", "vgpu", "mps", "mig"))
EXCLUSIVE = frozenset({Family("gpu"), Family("mig")})


def version_handler(git_version: str) -> type[BaseHTTPRequestHandler]:
    class Version(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            info = dict.fromkeys(("gitCommit", "gitTreeState", "buildDate", "goVersion", "compiler"), "x")
            info |= {"major": "1", "minor": "0", "gitVersion": git_version, "platform": "linux/amd64"}
            body = json.dumps(info).encode()
            self.send_response(200 if self.path.rstrip("/") == "/version" else 404)
            self.send_header("Content-Type", "application/json")
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, *args: object) -> None:
            pass

    return Version


ApiOf = Callable[[str | None], k8s.ApiClient]


@pytest.fixture
def api_of() -> Iterator[ApiOf]:
    with contextlib.ExitStack() as servers:

        def make(git_version: str | None) -> k8s.ApiClient:
            config = k8s.Configuration()
            if git_version is None:
                config.host = "http://127.0.0.1:9"  # nothing listens: the version cannot be read
            else:
                port = servers.enter_context(serving(version_handler(git_version)))
                config.host = f"http://127.0.0.1:{port}"
            config.retries = False
            return k8s.ApiClient(config)

        yield make


def offered(api: k8s.ApiClient, scheduler_version: str | None = None) -> frozenset[Family]:
    settings = NodeSettings(node_name="n", families=EVERY, scheduler_version=scheduler_version)
    return gated_settings(api, settings, None).families


def test_a_cluster_whose_scheduler_counts_shared_counters_gets_every_family(api_of: ApiOf) -> None:
    assert offered(api_of("v1.37.2")) == EVERY
    assert offered(api_of("v1.36.2")) == EVERY


def test_kube_scheduler_1_36_1_lacks_the_fix(api_of: ApiOf) -> None:
    assert offered(api_of("v1.36.1")) == EXCLUSIVE
    assert offered(api_of("v1.35.4")) == EXCLUSIVE


def test_another_schedulers_allocator_decides_when_it_is_older(api_of: ApiOf) -> None:
    # Volcano main vendors v1.36.1's allocator beside a 1.37 API server
    assert offered(api_of("v1.37.2"), "v1.36.1") == EXCLUSIVE
    assert offered(api_of("v1.37.2"), "v1.36.3") == EVERY
    # the older of the two: a newer Volcano does not lift an old kube-scheduler's limit
    assert offered(api_of("v1.35.4"), "v1.37.0") == EXCLUSIVE
    # no API server to ask: the declared release still decides
    assert offered(api_of(None), "v1.36.1") == EXCLUSIVE
    assert offered(api_of(None)) == EVERY
