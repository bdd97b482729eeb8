"""The certificate loop against a Secret store: made once, kept, renewed when due, a lost race re-read."""

import datetime as dt
import threading
from typing import Any

from admission.certs import Bundle
from admission.rotation import Rotation, SecretPlace, service_names, sync_once
from admission.server import Tls
from dra_driver.vocabulary.errors import TesseraError

NOW = dt.datetime(2026, 11, 26, 12, 0, tzinfo=dt.UTC)
PLACE = SecretPlace("ns", "tls", "cfg", tuple(service_names("svc", "ns")))


class FakeKube:
    def __init__(self) -> None:
        self.bundle: Bundle | None = None
        self.version = 0
        self.writes = 0
        self.ca_bundles: list[bytes] = []
        self.race: Bundle | None = None  # another replica writes this just before our first write

    def read_bundle(self, namespace: str, name: str) -> tuple[Bundle | None, str | None]:
        return self.bundle, (str(self.version) if self.bundle else None)

    def write_bundle(self, namespace: str, name: str, bundle: Bundle, version: str | None) -> bool:
        if self.race is not None:
            self.bundle, self.race, self.version = self.race, None, self.version + 1
            return False
        if (str(self.version) if self.bundle else None) != version:
            return False
        self.bundle, self.version, self.writes = bundle, self.version + 1, self.writes + 1
        return True

    def set_ca_bundle(self, configuration: str, ca_bundle: bytes) -> bool:
        changed = not self.ca_bundles or self.ca_bundles[-1] != ca_bundle
        self.ca_bundles.append(ca_bundle)
        return changed


def sync(kube: FakeKube, now: dt.datetime) -> Bundle:
    fake: Any = kube
    return sync_once(fake, PLACE, Tls(), now)


def test_made_once_then_kept() -> None:
    kube = FakeKube()
    first = sync(kube, NOW)
    assert kube.writes == 1 and kube.ca_bundles == [first.ca_bundle]
    assert sync(kube, NOW + dt.timedelta(days=30)) == first and kube.writes == 1


def test_renewed_when_due_with_the_same_ca() -> None:
    kube = FakeKube()
    first = sync(kube, NOW)
    later = sync(kube, NOW + dt.timedelta(days=300))
    assert kube.writes == 2 and later.ca == first.ca and later.serving != first.serving


def test_a_replica_that_loses_the_race_serves_the_winners_bundle() -> None:
    kube = FakeKube()
    winner = sync(FakeKube(), NOW)
    kube.race = winner
    assert sync(kube, NOW) == winner and kube.writes == 0


def test_a_periodic_step_survives_any_exception_and_runs_again() -> None:
    """The catalog refresh and the certificate check once died on an exception that was not a
    TesseraError, and never ran again."""
    ran: list[int] = []
    done = threading.Event()

    def step() -> None:
        ran.append(1)
        if len(ran) == 1:
            raise KeyError("a slice the catalog did not expect")
        if len(ran) == 2:
            raise TesseraError("the API server is away")
        done.set()

    rotation = Rotation(step, 0.01, name="catalog-refresh")
    rotation.start()
    try:
        assert done.wait(5) and len(ran) >= 3
    finally:
        rotation.stop()
