"""The webhook process: API client, certificate, catalog refresh and HTTPS server, wired together
(`tessera webhook`, admission/cli.py)."""

from __future__ import annotations

import argparse
import gc
import signal
import threading
import time
from collections.abc import Mapping
from typing import Any

import structlog

from admission.cli import options_from_args
from admission.convert.catalog import Catalog, known_products
from admission.convert.claims import Options
from admission.kube import Kube
from admission.review import admit
from admission.rotation import CertDir, Rotation, SecretPlace, service_names, sync_once, utc_now
from admission.server import Tls, WebhookServer
from dra_driver.system import logs
from dra_driver.system.api_client import api_client
from dra_driver.values.errors import TesseraError

log = structlog.get_logger()


class Webhook:
    """The answer function over the current options (the catalog changes as nodes come and go)."""

    def __init__(self, options: Options, kube: Kube | None) -> None:
        self._options, self._kube = options, kube
        self._lock = threading.Lock()

    @property
    def options(self) -> Options:
        with self._lock:
            return self._options

    def set_catalog(self, catalog: Catalog) -> None:
        with self._lock:
            if catalog != self._options.catalog:
                log.info("catalog of offered GPUs", products=catalog.describe())
            self._options = Options(
                catalog, self._options.high_priority_class, self._options.replace_schedulers
            )

    def refresh_catalog(self) -> None:
        if self._kube is None:
            return
        catalog = self._kube.catalog()
        self.set_catalog(catalog if catalog.products else known_products())

    def answer(self, review: Mapping[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        ensure = self._kube.ensure_templates if self._kube is not None else (lambda ns, ts, dry: None)
        result = admit(review, self.options, ensure)
        response = result["response"]
        if not response.get("allowed") or response.get("patch"):
            request = review.get("request") or {}
            log.info(
                "pod converted" if response.get("allowed") else "pod refused",
                namespace=request.get("namespace"),
                name=(request.get("object") or {}).get("metadata", {}).get("name") or request.get("name"),
                message=(response.get("status") or {}).get("message"),
                ms=round((time.perf_counter() - started) * 1000, 2),
            )
        return result


def run(args: argparse.Namespace) -> int:
    logs.configure(level=args.log_level, fmt=args.log_format)
    kube = Kube(api_client(args.kubeconfig))
    webhook = Webhook(options_from_args(args), kube)
    tls = Tls()
    if args.cert_dir is not None:
        step = CertDir(args.cert_dir, tls).step
    else:
        names = [
            *(service_names(args.service, args.namespace) if args.service else ()),
            *(args.dns_name or ()),
        ]
        place = SecretPlace(args.namespace, args.secret, args.webhook_configuration, tuple(names))

        def step() -> None:
            sync_once(kube, place, tls, utc_now())

    step()
    try:
        webhook.refresh_catalog()
    except TesseraError as e:
        log.warning("cannot read the ResourceSlices yet; converting for every known product", error=str(e))
    gc.collect()
    gc.freeze()  # what start-up made lives for the process: the collector need not walk it per request
    rotation, catalog = (
        Rotation(step, args.certificate_check),
        Rotation(webhook.refresh_catalog, args.catalog_refresh),
    )
    server = WebhookServer(args.address, args.port, tls, webhook.answer)
    stop = threading.Event()
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for part in (rotation, catalog, server):
        part.start()
    stop.wait()
    log.info("stopping")
    for part in (server, catalog, rotation):
        part.stop()
    return 0
