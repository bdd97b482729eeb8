"""The webhook process: API client, certificate, catalog refresh, HTTPS server and template reconciler,
wired together (`tessera webhook`, admission/cli.py)."""

from __future__ import annotations

import argparse
import dataclasses
import gc
import signal
import threading
import time
from collections.abc import Mapping, Sequence
from typing import Any

import structlog
from prometheus_client import generate_latest

from admission import metrics
from admission.cli import options_from_args, replaced_schedulers
from admission.convert.catalog import Catalog, known_products
from admission.convert.claims import Options
from admission.kube import VOLCANO_API_GROUP, Kube
from admission.review import StoredTemplate, admit
from admission.rotation import CertDir, Rotation, SecretPlace, service_names, sync_once, utc_now
from admission.server import Tls, WebhookServer
from admission.templates import TemplateReconciler, keep_pod, keep_template
from admission.watch import Watched
from dra_driver.io import logs
from dra_driver.io.api_client import api_client
from dra_driver.io.metrics_server import MetricsServer
from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.excerpt import excerpt

log = structlog.get_logger()


class Webhook:
    """The answer function over the current options (the catalog changes as nodes come and go)."""

    def __init__(self, options: Options, kube: Kube | None, stored: StoredTemplate | None = None) -> None:
        """`stored`: the templates as a watch last saw them (read only: answering writes nothing)."""
        self._options, self._kube = options, kube
        self._stored: StoredTemplate = stored or (lambda namespace, name: None)
        self._lock = threading.Lock()

    @property
    def options(self) -> Options:
        with self._lock:
            return self._options

    def set_catalog(self, catalog: Catalog) -> None:
        with self._lock:
            if catalog != self._options.catalog:
                log.info("catalog of offered GPUs", products=catalog.describe())
            self._options = dataclasses.replace(self._options, catalog=catalog)

    def set_replace_schedulers(self, replaced: tuple[str, ...]) -> None:
        with self._lock:
            if replaced != self._options.replace_schedulers:
                log.info("schedulerNames a converted pod loses", replaced=list(replaced))
            self._options = dataclasses.replace(self._options, replace_schedulers=replaced)

    def check_volcano(self, args: argparse.Namespace) -> None:
        """--volcano auto: `schedulerName: volcano` is kept while the API server serves Volcano's API (with
        any other setting the options already say what becomes of it)."""
        if self._kube is None or args.volcano != "auto" or args.keep_scheduler:
            return
        served = self._kube.serves_api_group(VOLCANO_API_GROUP)
        self.set_replace_schedulers(replaced_schedulers(args, volcano_served=served))

    def refresh_catalog(self) -> None:
        if self._kube is None:
            return
        catalog = self._kube.catalog()
        self.set_catalog(catalog if catalog.products else known_products())

    def answer(self, review: Mapping[str, Any]) -> dict[str, Any]:
        started = time.perf_counter()
        try:
            result = admit(review, self.options, self._stored)
        except Exception:  # the server answers 500 and logs it; counted here, where the time is known
            metrics.count_error(time.perf_counter() - started)
            raise
        metrics.count_review(review, result, time.perf_counter() - started)
        response = result["response"]
        if not response.get("allowed") or response.get("patch"):
            request = review.get("request") or {}
            pod = request.get("object")
            metadata = pod.get("metadata") if isinstance(pod, Mapping) else None
            name = metadata.get("name") if isinstance(metadata, Mapping) else None
            log.info(
                "pod converted" if response.get("allowed") else "pod refused",
                namespace=excerpt(request.get("namespace"), bare=True),
                name=excerpt(name or request.get("name"), bare=True),
                message=(response.get("status") or {}).get("message"),
                ms=round((time.perf_counter() - started) * 1000, 2),
            )
        return result


def metrics_server(address: str) -> MetricsServer | None:
    """The webhook's /metrics at `address` (HOST:PORT, :PORT; empty: none), plain HTTP on a port of its own,
    so a scraper needs no certificate; bound as the node plugin's (kubelet_plugin/observability)."""
    if not address:
        return None
    render = lambda: generate_latest(metrics.REGISTRY)  # noqa: E731
    return MetricsServer(address=address, render=render, healthz=lambda: None)


def _reconcile_when_listed(
    views: Sequence[Watched], reconciler: TemplateReconciler, stop: threading.Event
) -> None:
    """Nothing is made or deleted before both watches have listed (a template not seen yet is not missing,
    a Pod not seen yet still references its template)."""
    while not stop.is_set():
        if all(v.wait_synced(1.0) for v in views):
            reconciler.ready.set()
            log.info("template reconciler started")
            reconciler.resync()
            return


def run(args: argparse.Namespace) -> int:
    logs.configure(level=args.log_level, fmt=args.log_format)
    kube = Kube(api_client(args.kubeconfig))
    templates = Watched(name="resourceclaimtemplates", source=kube.templates(), keep=keep_template)
    webhook = Webhook(options_from_args(args), kube, templates.get)
    reconciler = TemplateReconciler(
        calls=kube, store=templates, options=lambda: webhook.options, grace_s=args.template_grace
    )
    templates.on_event = reconciler.on_template
    pods = Watched(
        name="converted-pods", source=kube.converted_pods(), keep=keep_pod, on_event=reconciler.on_pod
    )
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
    try:
        webhook.check_volcano(args)
    except TesseraError as e:
        log.warning("cannot tell yet whether Volcano is served; schedulerName volcano is removed until then",
                    error=str(e))  # fmt: skip
    gc.collect()
    gc.freeze()  # what start-up made lives for the process: the collector need not walk it per request
    stop = threading.Event()
    periodic = (
        Rotation(step, args.certificate_check),
        Rotation(webhook.refresh_catalog, args.catalog_refresh, name="catalog-refresh"),
        Rotation(reconciler.resync, args.template_resync, name="template-resync"),
        Rotation(lambda: webhook.check_volcano(args), args.catalog_refresh, name="volcano-check"),
    )
    server = WebhookServer(args.address, args.port, tls, webhook.answer, ready=lambda: templates.synced)
    scraped = metrics_server(args.metrics_address)
    served = (server,) if scraped is None else (server, scraped)
    starter = threading.Thread(
        target=_reconcile_when_listed, args=((templates, pods), reconciler, stop), daemon=True
    )
    signal.signal(signal.SIGTERM, lambda *_: stop.set())
    signal.signal(signal.SIGINT, lambda *_: stop.set())
    for part in (templates, pods, *periodic, *served, starter):
        part.start()
    stop.wait()
    log.info("stopping")
    for part in (*served, *periodic, pods, templates):
        part.stop()
    return 0
