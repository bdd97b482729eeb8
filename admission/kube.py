"""The webhook's API calls (the edge: kubernetes client errors become TesseraErrors here).

The template reconciler lists and watches converted Pods and ResourceClaimTemplates, creates and deletes the
templates it owns and posts Events on Pods; ResourceSlices give the catalog of offered products; a Secret
holds the TLS bundle, and the MutatingWebhookConfiguration gets its caBundle. Nothing here runs while a
review is answered.
"""

from __future__ import annotations

import base64
import datetime as dt
import json
from collections.abc import Sequence
from typing import Any

import structlog

from admission.certs import Bundle, KeyPair
from admission.convert import names
from admission.convert.catalog import Catalog, Skipped, from_slices
from admission.convert.pod import Template
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
    """The calls, over one ApiClient."""

    def __init__(self, api: Any) -> None:
        from kubernetes import client as k8s  # noqa: PLC0415

        self._resource = k8s.ResourceV1Api(api)
        self._core = k8s.CoreV1Api(api)
        self._admission = k8s.AdmissionregistrationV1Api(api)
        self._apis = k8s.ApisApi(api)
        self._exception: type[Exception] = k8s.ApiException
        self._models = k8s
        self._skipped: frozenset[Skipped] = frozenset()  # what the last catalog skipped (logged once)

    # ---- what the reconciler watches: raw responses, list or watch (`watch=True`) ----------------

    def list_pods(self, **query: Any) -> Any:
        """Pods the webhook converted, in every namespace (by the label its patch adds)."""
        return self._core.list_pod_for_all_namespaces(
            label_selector=CONVERTED_SELECTOR, _preload_content=False, **query
        )

    def list_templates(self, **query: Any) -> Any:
        """Every ResourceClaimTemplate: one not labelled as ours may squat on a name the conversion gives."""
        return self._resource.list_resource_claim_template_for_all_namespaces(_preload_content=False, **query)

    # ---- discovery -------------------------------------------------------------------------------

    def serves_api_group(self, group: str) -> bool:
        """Whether the API server serves `group` (discovery, /apis: every authenticated user may read it)."""
        try:
            groups = self._apis.get_api_versions().groups or []
        except (self._exception, ValueError) as e:
            raise ApiError(f"discover API groups: {_reason(e)}", _status(e)) from e
        return any(g.name == group for g in groups)

    # ---- templates -------------------------------------------------------------------------------

    def create_template(self, namespace: str, template: Template) -> dict[str, Any]:
        """Create `template`, labelled as the webhook's: the template as stored (an API server with a feature
        gate off drops that feature's fields). AlreadyExistsError when the name is taken."""
        where = f"create ResourceClaimTemplate {namespace}/{template.name}"
        try:
            body = self._models.V1ResourceClaimTemplate.model_validate(
                template.manifest(namespace, made_by_webhook=True)
            )
            raw: Any = self._resource.create_namespaced_resource_claim_template(
                namespace, body, _preload_content=False
            )
            stored: dict[str, Any] = json.loads(raw.data)
        except self._exception as e:
            if _status(e) == 409:
                raise AlreadyExistsError(f"{where}: it exists already") from e
            raise ApiError(f"{where}: {_reason(e)}", _status(e)) from e
        except ValueError as e:
            raise ApiError(f"{where}: the answer is not JSON: {e}") from e
        return stored

    def read_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        """The template as stored, None when there is none."""
        try:
            raw: Any = self._resource.read_namespaced_resource_claim_template(
                name, namespace, _preload_content=False
            )
            found: dict[str, Any] = json.loads(raw.data)
        except self._exception as e:
            if _status(e) == 404:
                return None
            raise ApiError(f"read ResourceClaimTemplate {namespace}/{name}: {_reason(e)}") from e
        except ValueError as e:
            raise ApiError(f"read ResourceClaimTemplate {namespace}/{name}: not JSON: {e}") from e
        return found

    def delete_template(self, namespace: str, name: str, uid: str) -> bool:
        """Delete the template if it is still the one seen (`uid`); False when it is gone or replaced."""
        options = self._models.V1DeleteOptions(preconditions=self._models.V1Preconditions(uid=uid))
        try:
            self._resource.delete_namespaced_resource_claim_template(name, namespace, body=options)
        except self._exception as e:
            if _status(e) in (404, 409):
                return False
            raise ApiError(f"delete ResourceClaimTemplate {namespace}/{name}: {_reason(e)}") from e
        return True

    def warn_pod(self, namespace: str, pod: str, uid: str, reason: str, message: str) -> None:
        """A Warning Event on the Pod (`kubectl describe pod` shows it)."""
        now = dt.datetime.now(dt.UTC)
        event = self._models.CoreV1Event(
            metadata=self._models.V1ObjectMeta(generate_name=f"{pod}.tessera-"),
            involved_object=self._models.V1ObjectReference(
                api_version="v1", kind="Pod", namespace=namespace, name=pod, uid=uid
            ),
            reason=reason,
            message=clip(message, 1024),
            type="Warning",
            source=self._models.V1EventSource(component=COMPONENT),
            first_timestamp=now,
            last_timestamp=now,
            count=1,
        )
        try:
            self._core.create_namespaced_event(namespace, event)
        except self._exception as e:
            raise ApiError(f"create Event on Pod {namespace}/{pod}: {_reason(e)}") from e

    # ---- catalog ---------------------------------------------------------------------------------

    def catalog(self) -> Catalog:
        try:
            raw: Any = self._resource.list_resource_slice(_preload_content=False)
            items = json.loads(raw.data).get("items") or []
        except (self._exception, ValueError) as e:
            raise ApiError(f"list ResourceSlices: {_reason(e)}") from e
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
            secret = self._core.read_namespaced_secret(name, namespace)
        except self._exception as e:
            if _status(e) == 404:
                return None, None
            raise ApiError(f"read Secret {namespace}/{name}: {_reason(e)}") from e
        data = {k: base64.b64decode(v) for k, v in (secret.data or {}).items()}
        try:
            bundle = Bundle(
                KeyPair(data["ca.crt"], data["ca.key"]), KeyPair(data["tls.crt"], data["tls.key"]),
                data.get("previous-ca.crt", b""),
            )  # fmt: skip
        except KeyError:
            bundle = None  # not ours, or half written: remade
        return bundle, str(secret.metadata.resource_version if secret.metadata else "")

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
            secret = self._models.V1Secret.model_validate(body)
            if resource_version is None:
                self._core.create_namespaced_secret(namespace, secret)
            else:
                self._core.replace_namespaced_secret(name, namespace, secret)
        except self._exception as e:
            if _status(e) == 409:
                return False
            raise ApiError(f"write Secret {namespace}/{name}: {_reason(e)}") from e
        return True

    def set_ca_bundle(self, configuration: str, ca_bundle: bytes) -> bool:
        """Put `ca_bundle` into every webhook of the MutatingWebhookConfiguration; True if it changed."""
        encoded = base64.b64encode(ca_bundle).decode()
        try:
            current: Any = self._admission.read_mutating_webhook_configuration(
                configuration, _preload_content=False
            )
            webhooks = json.loads(current.data).get("webhooks") or []
            if all((w.get("clientConfig") or {}).get("caBundle") == encoded for w in webhooks):
                return False
            patch = [
                {"op": "replace" if "caBundle" in (w.get("clientConfig") or {}) else "add",
                 "path": f"/webhooks/{i}/clientConfig/caBundle", "value": encoded}
                for i, w in enumerate(webhooks)
            ]  # fmt: skip
            # a list body goes as application/json-patch+json
            self._admission.patch_mutating_webhook_configuration(configuration, patch)
        except (self._exception, ValueError) as e:
            raise ApiError(
                f"set caBundle of MutatingWebhookConfiguration {configuration}: {_reason(e)}"
            ) from e
        return True


def _reason(e: Exception) -> str:
    body = getattr(e, "body", None)
    if isinstance(body, bytes | str):
        try:
            message = json.loads(body).get("message")
        except (ValueError, AttributeError):
            message = None
        if isinstance(message, str):
            return message
    return str(e).splitlines()[0] if str(e) else type(e).__name__
