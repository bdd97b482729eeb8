"""The webhook's API calls (the edge: kubernetes client errors become TesseraErrors here).

The template reconciler lists and watches converted Pods and ResourceClaimTemplates, creates and deletes the
templates it owns and posts Events on Pods; ResourceSlices give the catalog of offered products; a Secret
holds the TLS bundle, and the MutatingWebhookConfiguration gets its caBundle. Nothing here runs while a
review is answered.
"""

from __future__ import annotations

import base64
from collections.abc import Sequence
from typing import Any

import structlog
from kubernetes.client.exceptions import ApiException

from admission.certs import Bundle, KeyPair
from admission.convert import names
from admission.convert.catalog import Catalog, Skipped, from_slices
from admission.convert.pod import Template
from admission.watch import ApiSource
from dra_driver.io.api_objects import (
    API_GROUPS,
    EVENTS,
    MUTATING_WEBHOOK,
    NAMESPACED_TEMPLATES,
    PODS,
    SECRET,
    SECRETS,
    SLICES,
    TEMPLATE,
    TEMPLATES,
    event_body,
    field_at,
    path,
)
from dra_driver.io.rest_calls import JSON_PATCH, RestCalls, status_message
from dra_driver.vocabulary.errors import TesseraError
from dra_driver.vocabulary.excerpt import clip

log = structlog.get_logger()
COMPONENT = "tessera-admission"
CONVERTED_SELECTOR = f"{names.CONVERTED_LABEL[0]}={names.CONVERTED_LABEL[1]}"

# Volcano's scheduling API (PodGroups, Queues): served once Volcano's CRDs are installed
VOLCANO_API_GROUP = "scheduling.volcano.sh"

MAX_SKIPS_LOGGED = 20  # per refresh: a node publishing thousands of bad devices gets one summary line more


class ApiError(TesseraError):
    """An API call of the webhook failed; the message says which and why, `status` the HTTP status if any."""

    def __init__(self, message: str, status: int | None = None) -> None:
        super().__init__(message)
        self.status = status

    @property
    def refused(self) -> bool:
        """The API server refused the request itself (invalid, forbidden): trying again will not help."""
        return self.status is not None and 400 <= self.status < 500 and self.status not in (409, 429)


class AlreadyExistsError(ApiError):
    """A template of that name exists already: compare it, never assume it is the same."""


def _status(e: Exception) -> int | None:
    status = getattr(e, "status", None)
    return status if isinstance(status, int) else None


class Kube:
    """The calls, over one ApiClient, on plain JSON (dra_driver/io/rest_calls.py: the typed API classes
    cost ~2 CPU-s of every start)."""

    def __init__(self, api: Any) -> None:
        self._rest = RestCalls(api)
        self._skipped: frozenset[Skipped] = frozenset()  # what the last catalog skipped (logged once)

    # ---- what the reconciler watches -------------------------------------------------------------

    def converted_pods(self) -> ApiSource:
        """Pods the webhook converted, in every namespace (by the label its patch adds)."""
        return ApiSource(self._rest, PODS, labelSelector=CONVERTED_SELECTOR)

    def templates(self) -> ApiSource:
        """Every ResourceClaimTemplate: one not labelled as ours may squat on a name the conversion gives."""
        return ApiSource(self._rest, TEMPLATES)

    # ---- discovery -------------------------------------------------------------------------------

    def serves_api_group(self, group: str) -> bool:
        """Whether the API server serves `group` (discovery, /apis: every authenticated user may read it)."""
        try:
            groups = self._rest.get(API_GROUPS).get("groups") or []
        except ApiException as e:
            raise ApiError(f"discover API groups: {status_message(e)}", _status(e)) from e
        return any(isinstance(g, dict) and g.get("name") == group for g in groups)

    # ---- templates -------------------------------------------------------------------------------

    def create_template(self, namespace: str, template: Template) -> dict[str, Any]:
        """Create `template`, labelled as the webhook's: the template as stored (an API server with a feature
        gate off drops that feature's fields). AlreadyExistsError when the name is taken."""
        where = f"create ResourceClaimTemplate {namespace}/{template.name}"
        body = template.manifest(namespace, made_by_webhook=True)
        try:
            return self._rest.create(path(NAMESPACED_TEMPLATES, namespace=namespace), body)
        except ApiException as e:
            if _status(e) == 409:
                raise AlreadyExistsError(f"{where}: it exists already") from e
            raise ApiError(f"{where}: {status_message(e)}", _status(e)) from e

    def read_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The template as stored, None when there is none."""
        try:
            return self._rest.get(path(TEMPLATE, namespace=namespace, name=name))
        except ApiException as e:
            if _status(e) == 404:
                return None
            raise ApiError(f"read ResourceClaimTemplate {namespace}/{name}: {status_message(e)}") from e

    def delete_template(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the template if it is still the one seen (`uid`); False when it is gone or replaced."""
        options = {"apiVersion": "v1", "kind": "DeleteOptions", "preconditions": {"uid": uid}}
        try:
            self._rest.delete(path(TEMPLATE, namespace=namespace, name=name), options)
        except ApiException as e:
            if _status(e) in (404, 409):
                return False
            raise ApiError(f"delete ResourceClaimTemplate {namespace}/{name}: {status_message(e)}") from e
        return True

    def warn_pod(self, namespace: str, pod: str, uid: str, reason: str, message: str) -> None:
        """A Warning Event on the Pod (`kubectl describe pod` shows it)."""
        target = {"apiVersion": "v1", "kind": "Pod", "namespace": namespace, "name": pod, "uid": uid}
        event = event_body(target, reason=reason, message=message, kind="Warning", component=COMPONENT)
        try:
            self._rest.create(path(EVENTS, namespace=namespace), event)
        except ApiException as e:
            raise ApiError(f"create Event on Pod {namespace}/{pod}: {status_message(e)}") from e

    # ---- catalog ---------------------------------------------------------------------------------

    def catalog(self) -> Catalog:
        try:
            items = self._rest.get(SLICES).get("items") or []
        except ApiException as e:
            raise ApiError(f"list ResourceSlices: {status_message(e)}") from e
        catalog = from_slices(items)
        self._log_skipped(catalog.skipped)
        return catalog

    def _log_skipped(self, skipped: Sequence[Skipped]) -> None:
        """Each device the catalog skipped, at warning, when it first appears (not at every refresh)."""
        new = [s for s in dict.fromkeys(skipped) if s not in self._skipped]
        self._skipped = frozenset(skipped)
        for s in new[:MAX_SKIPS_LOGGED]:
            log.warning(
                "ResourceSlice device left out of the catalog of offered GPUs",
                slice=s.slice,
                device=s.device,
                field=s.field,
                why=clip(s.why, 300),
            )
        if len(new) > MAX_SKIPS_LOGGED:
            log.warning(
                "more ResourceSlice devices left out of the catalog of offered GPUs",
                count=len(new) - MAX_SKIPS_LOGGED,
            )

    # ---- TLS bundle ------------------------------------------------------------------------------

    def read_bundle(self, namespace: str, name: str) -> tuple[Bundle | None, str | None]:
        """The Secret's bundle and resourceVersion; (None, None) when there is no Secret."""
        try:
            secret = self._rest.get(path(SECRET, namespace=namespace, name=name))
        except ApiException as e:
            if _status(e) == 404:
                return None, None
            raise ApiError(f"read Secret {namespace}/{name}: {status_message(e)}") from e
        version = str(field_at(secret, "metadata", "resourceVersion") or "")
        try:
            data = {k: base64.b64decode(v, validate=True) for k, v in (secret.get("data") or {}).items()}
            bundle = Bundle(
                KeyPair(data["ca.crt"], data["ca.key"]), KeyPair(data["tls.crt"], data["tls.key"]),
                data.get("previous-ca.crt", b""),
            )  # fmt: skip
        except (KeyError, ValueError, TypeError, AttributeError):
            bundle = None  # not ours, or half written: remade
        return bundle, version

    def write_bundle(self, namespace: str, name: str, bundle: Bundle, resource_version: str | None) -> bool:
        """Store the bundle; False when another replica wrote first (re-read and use theirs)."""
        data = {
            "ca.crt": bundle.ca.cert_pem,
            "ca.key": bundle.ca.key_pem,
            "tls.crt": bundle.serving.cert_pem,
            "tls.key": bundle.serving.key_pem,
            "previous-ca.crt": bundle.previous_ca_pem,
        }
        metadata: dict[str, Any] = {
            "name": name,
            "namespace": namespace,
            "labels": {"app.kubernetes.io/part-of": "tessera"},
        }
        if resource_version is not None:
            metadata["resourceVersion"] = resource_version
        body = {
            "apiVersion": "v1",
            "kind": "Secret",
            "type": "kubernetes.io/tls",
            "metadata": metadata,
            "data": {k: base64.b64encode(v).decode() for k, v in data.items()},
        }
        try:
            if resource_version is None:
                self._rest.create(path(SECRETS, namespace=namespace), body)
            else:
                self._rest.replace(path(SECRET, namespace=namespace, name=name), body)
        except ApiException as e:
            if _status(e) == 409:
                return False
            raise ApiError(f"write Secret {namespace}/{name}: {status_message(e)}") from e
        return True

    def set_ca_bundle(self, configuration: str, ca_bundle: bytes) -> bool:
        """Put `ca_bundle` into every webhook of the MutatingWebhookConfiguration; True if it changed."""
        encoded = base64.b64encode(ca_bundle).decode()
        try:
            found = self._rest.get(path(MUTATING_WEBHOOK, name=configuration)).get("webhooks") or []
            webhooks = [w for w in found if isinstance(w, dict)]
            if all((w.get("clientConfig") or {}).get("caBundle") == encoded for w in webhooks):
                return False
            patch = [
                {"op": "replace" if "caBundle" in (w.get("clientConfig") or {}) else "add",
                 "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded}
                for i, w in enumerate(webhooks)
            ]  # fmt: skip
            self._rest.patch(path(MUTATING_WEBHOOK, name=configuration), patch, content_type=JSON_PATCH)
        except ApiException as e:
            raise ApiError(
                f"set caBundle of MutatingWebhookConfiguration {configuration}: {status_message(e)}"
            ) from e
        return True
