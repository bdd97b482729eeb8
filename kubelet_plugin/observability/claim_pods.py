"""Which pods hold each prepared claim, for the `pod` label of the per-claim metrics.

The names come from the claim's `status.reservedFor` (the scheduler reserves a claim for its pod before the
pod is bound, so the claim prepare reads already names it). The kubelet's prepare call names only the claim
(namespace, name, UID: the DRA v1 `Claim` message has no pod), so the pods are read from the claim itself:

- at no extra cost whenever the daemon reads a claim anyway (prepare, start-up reconciliation, the usage
  loop): `PodNotingSource` wraps the daemon's `ClaimSource` and notes what each claim it returns names;
- by a bounded loop (`refresh`) for prepared claims it has not read since it started (another instance
  prepared them) and, every `RECHECK_S`, for the rest (a shared claim gains and loses pods): at most
  `READS_PER_ROUND` claim reads a round.

`status.reservedFor` is not trusted: only `pods` entries of the core group whose names are DNS subdomains
count, at most `MAX_PODS` of them per claim (sorted; more shown as `+N`), and a claim object whose UID is not
the prepared claim's names nothing. A scrape only reads this table (no API call).
"""

from __future__ import annotations

import re
import threading
import time
from collections.abc import Callable, Sequence
from typing import Any

import structlog
from urllib3.exceptions import HTTPError as TransportError

from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.api import ClaimSource
from kubelet_plugin.record.results import ClaimRef

log = structlog.get_logger(__name__)

MAX_PODS = 8  # per claim in the label; reservedFor may list up to 256 consumers
MAX_NAME = 253  # a pod's name is a DNS subdomain
ROUND_S = 2.0  # how often the loop looks for claims to read
RECHECK_S = 30.0  # how old a claim's pods may get before they are read again
READS_PER_ROUND = 16
_SUBDOMAIN = re.compile(r"[a-z0-9]([-a-z0-9]*[a-z0-9])?(\.[a-z0-9]([-a-z0-9]*[a-z0-9])?)*")


def pod_names(claim: Any) -> tuple[str, ...] | None:
    """The pods a claim object (`kubernetes` v1 model) is reserved for, validated and sorted; None when the
    object is not a readable claim."""
    status = getattr(claim, "status", None)
    consumers = getattr(status, "reserved_for", None)
    if consumers is None:
        return ()
    if not isinstance(consumers, list):
        return None
    names = {
        name
        for c in consumers
        if getattr(c, "resource", None) == "pods"
        and getattr(c, "api_group", None) in (None, "")
        and isinstance(name := getattr(c, "name", None), str)
        and len(name) <= MAX_NAME
        and _SUBDOMAIN.fullmatch(name)
    }
    return tuple(sorted(names))


def label_value(pods: Sequence[str]) -> str:
    """`a,b`; past `MAX_PODS` the rest are counted (`a,…,h,+3`), so a label stays bounded."""
    shown = list(pods[:MAX_PODS])
    if len(pods) > MAX_PODS:
        shown.append(f"+{len(pods) - MAX_PODS}")
    return ",".join(shown)


class ClaimPods:
    """UID → the claim's pods, as last read; `version` moves whenever some claim's pods changed."""

    def __init__(self, *, clock: Callable[[], float] = time.monotonic) -> None:
        self._clock = clock
        self._pods: dict[ClaimUID, str] = {}
        self._read_at: dict[ClaimUID, float] = {}
        self._version = 0
        self._prepared: set[ClaimUID] = set()  # the prepared claims as the last round saw them
        self._lock = threading.Lock()

    def pods(self, uid: ClaimUID) -> str:
        with self._lock:
            return self._pods.get(uid, "")

    def version(self) -> int:
        with self._lock:
            return self._version

    def note(self, uid: ClaimUID, pods: Sequence[str]) -> None:
        """What a read of the claim found (names already validated, `pod_names`)."""
        value = label_value(pods)
        with self._lock:
            self._read_at[uid] = self._clock()
            if self._pods.get(uid, "") != value:
                self._pods[uid] = value
                self._version += 1

    def _touch(self, uid: ClaimUID) -> None:
        with self._lock:
            self._read_at[uid] = self._clock()

    def note_claim(self, claim: Any) -> None:
        """A claim object read for any reason; one without a UID or readable status notes nothing."""
        uid = getattr(getattr(claim, "metadata", None), "uid", None)
        pods = pod_names(claim)
        if isinstance(uid, str) and uid and pods is not None:
            self.note(ClaimUID(uid), pods)

    def due(self, claims: Sequence[ClaimRef]) -> list[ClaimRef]:
        """The claims to read this round, never read ones first; forgets claims no longer prepared.

        A claim noted but not yet among the prepared ones is being prepared (prepare reads the claim before
        its checkpoint records it): it is kept until `RECHECK_S` has passed, so a round between the two does
        not blank the label its pod's first scrape shows."""
        now = self._clock()
        live = {c.uid for c in claims}
        with self._lock:
            for uid in [u for u in self._read_at if u not in live]:
                if uid not in self._prepared and now - self._read_at[uid] < RECHECK_S:
                    continue
                del self._read_at[uid]
                if self._pods.pop(uid, ""):
                    self._version += 1
            self._prepared = live
            read_at = dict(self._read_at)
        never = [c for c in claims if c.uid not in read_at]
        stale = sorted(
            (c for c in claims if c.uid in read_at and now - read_at[c.uid] >= RECHECK_S),
            key=lambda c: read_at[c.uid],
        )
        return (never + stale)[:READS_PER_ROUND]

    def refresh(self, claims: Sequence[ClaimRef], source: ClaimSource) -> int:
        """One round: read the due claims through `source`; returns how many were read."""
        read = 0
        for c in self.due(claims):
            try:
                claim = source.get(namespace=c.namespace, name=c.name)
            except (TesseraError, TransportError, OSError) as e:
                log.debug("claim pods not read", claim=c.uid, error=str(e))
                self._touch(c.uid)  # keep what was known; try again at the next recheck, not every round
                continue
            read += 1
            if getattr(getattr(claim, "metadata", None), "uid", None) == c.uid:
                self.note_claim(claim)
            else:  # deleted and made again under the same name: not the prepared claim's pods
                self.note(c.uid, ())
        return read

    def run(
        self,
        claims: Callable[[], Sequence[ClaimRef]],
        source: ClaimSource,
        stop: threading.Event,
        *,
        interval: float = ROUND_S,
    ) -> None:
        while not stop.wait(interval):
            try:
                self.refresh(claims(), source)
            except Exception:  # one bad round must not end the loop
                log.exception("claim pods round failed")


class PodNotingSource:
    """A `ClaimSource` that notes the pods of every claim it returns."""

    def __init__(self, inner: ClaimSource, pods: ClaimPods) -> None:
        self._inner = inner
        self._pods = pods

    def get(self, *, namespace: str, name: str) -> Any:
        claim = self._inner.get(namespace=namespace, name=name)
        self._pods.note_claim(claim)
        return claim
