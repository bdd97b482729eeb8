"""The webhook's catalog from a real HTTP API server stand-in: a bad device in one node's slice leaves every
other product and profile in the catalog, and is logged at warning once, bounded. Whether it keeps
`schedulerName: volcano` follows the API groups the stand-in serves (--volcano auto)."""

from __future__ import annotations

import base64
import json
from collections.abc import Iterator, MutableMapping
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

import pytest
from structlog.testing import capture_logs

from admission.cli import options_from_args
from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.kube import MAX_SKIPS_LOGGED, VOLCANO_API_GROUP, ApiError, Kube
from admission.main import Webhook
from dra_driver.io.api_client import api_client
from kubelet_plugin.command import build_parser
from tests.support.catalog_slices import EXPECTED, GOOD, H100, L4, device, slice_of
from tests.support.loopback import serving
from tests.unit.admission.test_review import apply_patch

SLICES_PATH = "/apis/resource.k8s.io/v1/resourceslices"


def group(name: str) -> dict[str, Any]:
    version = {"groupVersion": f"{name}/v1", "version": "v1"}
    return {"name": name, "versions": [version], "preferredVersion": version}


class ApiServer:
    """Answers LIST ResourceSlices with `items` and discovery (/apis) with `groups`, over a real socket
    (`handler()`); `discovery_status` other than 200 makes discovery fail."""

    def __init__(self) -> None:
        self.items: list[Any] = []
        self.groups: list[str] = ["resource.k8s.io"]
        self.discovery_status = 200
        self.url = ""

    def handler(self) -> type[BaseHTTPRequestHandler]:
        outer = self

        class Handler(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                path = self.path.split("?")[0].rstrip("/")
                if path == "/apis" and outer.discovery_status == 200:
                    found = {"kind": "APIGroupList", "groups": [group(g) for g in outer.groups]}
                    body = json.dumps(found).encode()
                elif path == "/apis":
                    self.send_error(outer.discovery_status)
                    return
                elif path != SLICES_PATH:
                    self.send_error(404)
                    return
                else:
                    body = json.dumps({"kind": "ResourceSliceList", "items": outer.items}).encode()
                self.send_response(200)
                self.send_header("Content-Type", "application/json")
                self.send_header("Content-Length", str(len(body)))
                self.end_headers()
                self.wfile.write(body)

            def log_message(self, *args: Any) -> None:
                pass

        return Handler


@pytest.fixture
def server() -> Iterator[ApiServer]:
    s = ApiServer()
    with serving(s.handler()) as port:
        s.url = f"http://127.0.0.1:{port}"
        yield s


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


VOLCANO_POD = {
    "apiVersion": "v1",
    "kind": "Pod",
    "metadata": {"name": "test1"},
    "spec": {
        "schedulerName": "volcano",
        "containers": [{"name": "c", "image": "x", "resources": {"limits": {"volcano.sh/vgpu-number": 1}}}],
    },
}


def scheduler_after_admission(webhook: Webhook) -> str | None:
    """The Pod's schedulerName once the webhook's patch is applied (None: removed)."""
    review = {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": "CREATE",
            "namespace": "ns",
            "object": VOLCANO_POD,
        },
    }
    response = webhook.answer(review)["response"]
    assert response["allowed"], response
    pod = apply_patch(VOLCANO_POD, json.loads(base64.b64decode(response["patch"])))
    scheduler: str | None = pod["spec"].get("schedulerName")
    return scheduler


def webhook_args(*flags: str) -> Any:
    return build_parser().parse_args(["webhook", *flags])


@pytest.mark.parametrize(
    ("flags", "served", "expected"),
    [
        ((), True, "volcano"),  # auto, Volcano installed: vc-scheduler places the pod
        ((), False, None),  # auto, no Volcano: kube-scheduler does
        (("--volcano=keep",), False, "volcano"),
        (("--volcano=remove",), True, None),
        (("--replace-scheduler=volcano",), True, None),  # an explicit list wins over auto
        (("--keep-scheduler", "--volcano=remove"), False, "volcano"),
    ],
)
def test_volcano_scheduler_follows_the_cluster_and_the_flags(
    server: ApiServer, webhook: Webhook, flags: tuple[str, ...], served: bool, expected: str | None
) -> None:
    args = webhook_args(*flags)
    server.groups = ["resource.k8s.io", *([VOLCANO_API_GROUP] if served else [])]
    webhook.set_replace_schedulers(options_from_args(args).replace_schedulers)
    webhook.check_volcano(args)
    assert scheduler_after_admission(webhook) == expected


def test_auto_follows_volcano_coming_and_going_and_a_failed_check_changes_nothing(
    server: ApiServer, webhook: Webhook
) -> None:
    args = webhook_args()
    webhook.set_replace_schedulers(options_from_args(args).replace_schedulers)
    assert scheduler_after_admission(webhook) is None  # before the first check: removed, as before
    server.groups.append(VOLCANO_API_GROUP)
    webhook.check_volcano(args)
    assert scheduler_after_admission(webhook) == "volcano"
    server.discovery_status = 503
    with pytest.raises(ApiError, match="discover API groups"):
        webhook.check_volcano(args)
    assert scheduler_after_admission(webhook) == "volcano"
    server.discovery_status = 200
    server.groups.remove(VOLCANO_API_GROUP)
    webhook.check_volcano(args)
    assert scheduler_after_admission(webhook) is None
