"""The template reconciler: the ResourceClaimTemplates converted Pods reference, made once the API server has
admitted the Pod, and removed once no live Pod references them.

Answering a review writes nothing (admission/review.py), so a forged AdmissionReview changes nothing. This
runs in every webhook replica (idempotent: two replicas making one template meet a 409 and compare it) over
two watches: Pods carrying the label the webhook's patch adds, and ResourceClaimTemplates.

- A live Pod (not finished, not deleted before it was scheduled) gets each template it references that does
  not exist, with the content the conversion gives again from what the Pod carries
  (admission/convert/promises.py) under the webhook's current options, and only when that gives the very
  name the Pod references; otherwise a Warning Event on the Pod says why and what to do.
- A template of that name with other content, or without the conversion's label, is never used: a Warning
  Event names it (admission refuses such Pods too). A 409 on create is followed by a comparison.
- A template the webhook made (label `admission.tessera.dev/made-by: webhook`; `tessera convert`'s GitOps
  templates never carry it) that no live Pod references for `grace_s` is deleted. A Pod admitted meanwhile
  heals itself: its template is made again.

Latency: kube-controller-manager's resourceclaim controller (pkg/controller/resourceclaim/controller.go) makes
a Pod's claim from its template. When the template is missing, the Pod's sync fails (a
FailedResourceClaimCreation Event) and its key is requeued with AddRateLimited: the default controller rate
limiter, 5 ms doubling per failure up to 1000 s, and 10/s with a burst of 100 over all keys. Since
kubernetes#135983 (January 2026; in the 1.37.2 the e2e runs) a template's add event also enqueues at once
every Pod that references it, so the claim follows the template without waiting out the backoff; 1.35.4 has
no such handler and finds the template at the Pod's next retry. The reconciler sees the Pod in the same stream
of watch events as the controller and makes the template at once (docs/security.md, docs/performance.md).
"""

from __future__ import annotations

import threading
import time
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from typing import Any, Protocol

import structlog

from admission import metrics
from admission.convert.claims import Options
from admission.convert.names import CLAIM_PREFIX, CONVERTED_ANNOTATION
from admission.convert.pod import Template
from admission.convert.promises import Promised, rederive
from admission.convert.stored import difference, made_by_webhook, refusal
from admission.kube import AlreadyExistsError, ApiError
from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.excerpt import clip

log = structlog.get_logger()
Key = tuple[str, str]  # (namespace, name)
REASON_NOT_MADE = "ClaimTemplateNotMade"
MADE_MEMORY_S = 30.0  # how long a template made is taken to exist before the watch shows it
# The conversion names every template it writes so; others are neither squatters nor ours.
NAME_PREFIX = "tessera-"


class Calls(Protocol):
    """What the reconciler asks of the API server (admission.kube.Kube)."""

    def create_template(self, namespace: str, template: Template) -> Mapping[str, Any]: ...
    def read_template(self, namespace: str, name: str) -> dict[str, Any] | None: ...
    def delete_template(self, namespace: str, name: str, uid: str) -> bool: ...
    def warn_pod(self, namespace: str, pod: str, uid: str, reason: str, message: str) -> None: ...


class Store(Protocol):
    """The templates as last seen (admission.watch.Watched)."""

    def get(self, namespace: str, name: str) -> Mapping[str, Any] | None: ...
    def items(self) -> list[Mapping[str, Any]]: ...


def keep_pod(pod: Mapping[str, Any]) -> dict[str, Any]:
    """What the reconciler reads of a Pod (the watch's store keeps only this)."""
    metadata, spec = pod.get("metadata") or {}, pod.get("spec") or {}
    annotations = metadata.get("annotations") or {}
    record = annotations.get(CONVERTED_ANNOTATION) if isinstance(annotations, Mapping) else None
    containers = {
        k: [{"name": c.get("name"), "env": c.get("env")} for c in spec.get(k) or () if isinstance(c, Mapping)]
        for k in ("initContainers", "containers")
        if isinstance(spec.get(k), list)
    }
    return {
        "metadata": {
            **{k: metadata.get(k) for k in ("namespace", "name", "uid", "deletionTimestamp")},
            "annotations": {} if record is None else {CONVERTED_ANNOTATION: record},
        },
        "spec": {**containers, **{k: spec.get(k) for k in ("resourceClaims", "nodeName")}},
        "status": {k: (pod.get("status") or {}).get(k) for k in ("phase", "resourceClaimStatuses")},
    }


def keep_template(template: Mapping[str, Any]) -> Mapping[str, Any] | None:
    """Templates of the names the conversion gives, as stored; no others."""
    metadata = template.get("metadata") or {}
    name = metadata.get("name")
    if not isinstance(name, str) or not name.startswith(NAME_PREFIX):
        return None
    return {
        "metadata": {k: metadata.get(k) for k in ("namespace", "name", "uid", "labels")},
        "spec": template.get("spec"),
    }


def live(pod: Mapping[str, Any]) -> bool:
    """Whether the Pod may still need its claims made: as the resourceclaim controller decides it."""
    metadata, spec, status = (pod.get(k) or {} for k in ("metadata", "spec", "status"))
    if status.get("phase") in ("Succeeded", "Failed"):
        return False
    return not (metadata.get("deletionTimestamp") and not spec.get("nodeName"))


def unused(
    stored: Iterable[Mapping[str, Any]],
    referenced: set[Key],
    since: dict[Key, float],
    now: float,
    grace_s: float,
) -> tuple[list[tuple[Key, str]], dict[Key, float]]:
    """The webhook's templates no live Pod referenced for `grace_s` ((key, uid) each), and when each
    still-unreferenced one was first seen so (the `since` to pass next time)."""
    due, seen = [], {}
    for t in stored:
        metadata = t.get("metadata") or {}
        key = (str(metadata.get("namespace")), str(metadata.get("name")))
        if not made_by_webhook(t) or key in referenced:
            continue
        seen[key] = since.get(key, now)
        if now - seen[key] >= grace_s:
            due.append((key, str(metadata.get("uid") or "")))
    return due, seen


def claimed(pod: Mapping[str, Any]) -> frozenset[str]:
    """The pod claims whose ResourceClaim the resourceclaim controller has made (their template is no longer
    needed by this Pod)."""
    statuses = (pod.get("status") or {}).get("resourceClaimStatuses")
    listed = statuses if isinstance(statuses, list) else []
    return frozenset(
        str(s.get("name")) for s in listed if isinstance(s, Mapping) and s.get("resourceClaimName")
    )


@dataclass(slots=True)
class _Pod:
    uid: str
    promised: Promised
    claimed: frozenset[str] = frozenset()
    warned: set[str] = field(default_factory=set)


class TemplateReconciler:
    """Reacts to the two watches (`on_pod`, `on_template`); `resync` (periodic) makes what is missing and
    deletes what is unused."""

    def __init__(
        self,
        *,
        calls: Calls,
        store: Store,
        options: Callable[[], Options],
        grace_s: float = 300.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._calls, self._store, self._options = calls, store, options
        self._grace_s, self._clock = grace_s, clock
        self._lock = threading.Lock()
        self._pods: dict[Key, _Pod] = {}
        self._since: dict[Key, float] = {}
        self._made: dict[Key, float] = {}  # made, and not yet seen by the watch: no second create meanwhile
        self.ready = threading.Event()  # set once both watches have listed: until then, nothing is made

    # ---- the watches' events ---------------------------------------------------------------------

    def on_pod(self, kind: str, pod: Mapping[str, Any]) -> None:
        metadata = pod.get("metadata") or {}
        key = (str(metadata.get("namespace") or ""), str(metadata.get("name") or ""))
        if kind == "DELETED" or not live(pod):
            with self._lock:
                self._pods.pop(key, None)
            return
        uid = str(metadata.get("uid") or "")
        promised = rederive(metadata, pod.get("spec") or {}, self._options())
        with self._lock:
            known = self._pods.get(key)
            state = known if known is not None and known.uid == uid else _Pod(uid, promised)
            state.promised, state.claimed = promised, claimed(pod)
            self._pods[key] = state
        if self.ready.is_set():
            self._ensure(key, state)

    def on_template(self, kind: str, template: Mapping[str, Any]) -> None:
        """A template deleted while a live Pod references it is made again."""
        metadata = template.get("metadata") or {}
        namespace, name = str(metadata.get("namespace")), str(metadata.get("name"))
        with self._lock:
            self._made.pop((namespace, name), None)
        if kind != "DELETED" or not self.ready.is_set():
            return
        with self._lock:
            users = [(k, p) for k, p in self._pods.items() if k[0] == namespace and _references(p, name)]
        for key, state in users:  # the first that still needs it makes it; the others find it made
            self._ensure(key, state)

    # ---- periodic --------------------------------------------------------------------------------

    def resync(self) -> None:
        """Make every missing template a live Pod was promised; delete the webhook's unused ones."""
        if not self.ready.is_set():
            return
        with self._lock:
            pods = list(self._pods.items())
            referenced = {(k[0], name) for k, p in pods for _, name in p.promised.references}
        for key, state in pods:
            self._ensure(key, state)
        due, since = unused(self._store.items(), referenced, self._since, self._clock(), self._grace_s)
        self._since = since
        for (namespace, name), uid in due:
            with self._lock:  # a Pod seen since the pass began keeps it
                if any(k[0] == namespace and _references(p, name) for k, p in self._pods.items()):
                    continue
            try:
                if self._calls.delete_template(namespace, name, uid):
                    metrics.template_swept()
                    log.info("unused claim template deleted", namespace=namespace, template=name)
            except TesseraError as e:
                log.warning("cannot delete an unused claim template", error=clip(str(e), 500))

    # ---- one Pod ---------------------------------------------------------------------------------

    def _ensure(self, key: Key, state: _Pod) -> None:
        """Make what the Pod still needs: the template of each of the conversion's claims whose
        ResourceClaim is not made yet. A Pod that needs none (its claims made, or its templates there) is
        told nothing, whatever its record says now (a catalog changed since does not matter to it)."""
        namespace, pod = key
        made, problems = dict(state.promised.templates), dict(state.promised.problems)
        for claim, name in state.promised.references:
            if not claim.startswith(CLAIM_PREFIX) or claim in state.claimed:
                continue  # not the conversion's claim, or its ResourceClaim exists
            template = made.get(claim)
            if template is None:
                if self._store.get(namespace, name) is None:
                    why = problems.get(claim) or problems.get("") or _unrecorded(claim, name)
                    self._warn(key, state, why)
                continue
            try:
                problem = self._make(namespace, template)
            except ApiError as e:
                log.warning("cannot make a claim template", namespace=namespace, pod=pod,
                            error=clip(str(e), 500))  # fmt: skip
                if e.refused:  # invalid on this cluster, or forbidden: the Pod waits for it, so say why
                    self._warn(key, state, f"{e}; the claim of container {template.container} cannot be made")
                continue  # else the API server is away: the next resync tries again
            if problem is not None:
                self._warn(key, state, refusal(namespace, template, problem))

    def _make(self, namespace: str, template: Template) -> str | None:
        """Make `template` unless the cluster has it; what is wrong with one of its name that is there."""
        found = self._store.get(namespace, template.name)
        key = (namespace, template.name)
        if found is None:
            with self._lock:
                if self._clock() - self._made.get(key, -MADE_MEMORY_S) < MADE_MEMORY_S:
                    return None
            try:
                found = self._calls.create_template(namespace, template)
                with self._lock:
                    self._made[key] = self._clock()
                metrics.template_made()
                log.info("claim template made", namespace=namespace, template=template.name)
            except AlreadyExistsError:
                found = self._calls.read_template(namespace, template.name)
                if found is None:  # deleted between the two calls: the next event or resync makes it
                    return None
        return difference(found, template)

    def _warn(self, key: Key, state: _Pod, message: str) -> None:
        if message in state.warned:
            return  # once per Pod and reason: a Pod's status updates come again and again
        state.warned.add(message)
        log.warning("claim template not made", namespace=key[0], pod=key[1], reason=clip(message, 500))
        try:
            self._calls.warn_pod(key[0], key[1], state.uid, REASON_NOT_MADE, message)
        except TesseraError as e:
            log.warning("cannot post an Event", error=clip(str(e), 300))


def _unrecorded(claim: str, name: str) -> str:
    return (
        f"spec.resourceClaims[{claim}]: references ResourceClaimTemplate {name}, which does not exist, and "
        f"the pod's {CONVERTED_ANNOTATION} record has no entry for that claim; delete the pod so that its "
        "controller makes it again"
    )


def _references(state: _Pod, name: str) -> bool:
    return any(t == name for _, t in state.promised.references)
