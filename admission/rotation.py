"""Keeping the webhook's certificate: in its own Secret, renewed before expiry, trusted through caBundle.

Every replica runs the same loop: read the Secret, renew what `certs.renew` says is due, write it back with
the resourceVersion it read (a replica that loses the race reads the winner's), put the CA into the
MutatingWebhookConfiguration, and serve the Secret's certificate. With cert-manager the chart mounts its
Secret instead (`--cert-dir`), and this loop only reloads the files when they change.
"""

from __future__ import annotations

import datetime as dt
import threading
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import structlog

from admission.certs import Bundle, renew
from admission.kube import Kube
from admission.server import Tls
from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.excerpt import clip

log = structlog.get_logger()
Clock = Callable[[], dt.datetime]


def utc_now() -> dt.datetime:
    return dt.datetime.now(dt.UTC)


def service_names(service: str, namespace: str) -> list[str]:
    """The names the API server may use for the webhook's Service."""
    return [
        f"{service}.{namespace}.svc",
        service,
        f"{service}.{namespace}",
        f"{service}.{namespace}.svc.cluster.local",
    ]


@dataclass(frozen=True, slots=True)
class SecretPlace:
    namespace: str
    secret: str
    webhook_configuration: str
    dns_names: tuple[str, ...]


def sync_once(kube: Kube, place: SecretPlace, tls: Tls, now: dt.datetime) -> Bundle:
    """One pass: the Secret's bundle, renewed where due, stored, trusted and served."""
    for _ in range(5):
        current, version = kube.read_bundle(place.namespace, place.secret)
        fresh = renew(current, list(place.dns_names), now)
        if fresh is None and current is not None:
            bundle = current
            break
        assert fresh is not None
        if kube.write_bundle(place.namespace, place.secret, fresh, version):
            log.info("webhook certificate written", secret=f"{place.namespace}/{place.secret}",
                     expires=fresh.serving.cert.not_valid_after_utc.isoformat())  # fmt: skip
            bundle = fresh
            break
    else:
        raise TesseraError(
            f"Secret {place.namespace}/{place.secret} keeps changing under the webhook; retry later"
        )
    if kube.set_ca_bundle(place.webhook_configuration, bundle.ca_bundle):
        log.info("caBundle set", configuration=place.webhook_configuration)
    tls.load(bundle.serving)
    return bundle


class Rotation:
    """Runs `step` every `interval` seconds until stopped: `sync_once` (or reloads --cert-dir files), and so
    the catalog refresh and the template resync. A step that fails, however, is logged and tried again the
    next period: the thread never dies of it."""

    def __init__(
        self, step: Callable[[], None], interval: float, *, name: str = "webhook-certificate"
    ) -> None:
        self._step, self._interval, self._name = step, interval, name
        self._stop = threading.Event()
        self._thread = threading.Thread(target=self._run, name=name, daemon=True)

    def start(self) -> None:
        self._thread.start()

    def stop(self) -> None:
        self._stop.set()
        self._thread.join(timeout=5)

    def _run(self) -> None:
        while not self._stop.wait(self._interval):
            try:
                self._step()
            except TesseraError as e:
                log.warning("periodic step failed; tried again next period", step=self._name,
                            error=clip(str(e), 500))  # fmt: skip
            except Exception as e:  # a bug or a library's surprise: the step is tried again all the same
                log.error("periodic step failed unexpectedly; tried again next period", step=self._name,
                          error=clip(repr(e), 500))  # fmt: skip


class CertDir:
    """cert-manager's Secret mounted as files: reloaded when they change."""

    def __init__(self, directory: Path, tls: Tls) -> None:
        self._cert, self._key, self._tls = directory / "tls.crt", directory / "tls.key", tls
        self._seen: tuple[float, float] | None = None

    def step(self) -> None:
        try:
            stamp = (self._cert.stat().st_mtime, self._key.stat().st_mtime)
        except OSError as e:
            raise TesseraError(f"cannot read {self._cert}: {e}") from e
        if stamp != self._seen:
            self._tls.load_files(self._cert, self._key)
            self._seen = stamp
            log.info("serving certificate loaded", path=str(self._cert))
