"""The node plugin's own identity, as a real install gives it: the chart's ServiceAccount, ClusterRole,
binding and admission policies (from deploy/manifests/tessera.yaml), a plugin Pod object bound to the node,
and a token bound to that pod (what the kubelet projects into the plugin's container), in a kubeconfig.

On a stand-in node the pod never runs as a container: e2e.harness.node.SimNode starts the daemon itself, so
the pod carries the stand-in's run-elsewhere label. On the real node (e2e.realnode) the real kubelet runs it
as a sleeper (`pod_manifest` of `issue`), while the daemon runs on the host. The pod exists because binding
the token to a pod on the node is what makes the API server put the node's name into the token
(`authentication.kubernetes.io/node-name`), which the node-slices policy and the `associated-node:` verbs
read. Deleting the pod revokes the token.
"""

from __future__ import annotations

import json
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any, NewType

import structlog
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.names import DRIVER_NAME
from e2e.controlplane.files import write_atomic
from e2e.harness.kube import wait_for
from e2e.harness.server_apply import ServerApply
from e2e.kubelet_standin.kubelet import RUN_ELSEWHERE_LABEL
from e2e.kubelet_standin.pod_status import HOST_IP, running_status

log = structlog.get_logger(__name__)

REPO_ROOT = Path(__file__).resolve().parents[2]
MANIFESTS = REPO_ROOT / "deploy" / "manifests" / "tessera.yaml"
SYSTEM_NS = "tessera-system"
SERVICE_ACCOUNT = "tessera-node-plugin"
USERNAME = f"system:serviceaccount:{SYSTEM_NS}:{SERVICE_ACCOUNT}"
SLICE_POLICY = "node-slices.gpu.tessera.dev"
# What the plugin's identity is made of; the chart's DeviceClasses, ConfigMap and DaemonSet are not.
IDENTITY_KINDS = frozenset(
    {
        "Namespace",
        "ServiceAccount",
        "ClusterRole",
        "ClusterRoleBinding",
        "ValidatingAdmissionPolicy",
        "ValidatingAdmissionPolicyBinding",
    }
)
# Long enough for a demo left running over a day; the plugin reads its kubeconfig once and never refreshes.
TOKEN_LIFETIME_S = 24 * 3600
# A node no simulated node is called: slices for it must be refused once the policy is in force.
NOWHERE_NODE = "tessera-identity-probe"

Json = dict[str, Any]
PodName = NewType("PodName", str)


@dataclass(frozen=True, slots=True)
class PluginCredentials:
    node: str
    pod: PodName  # in SYSTEM_NS; the token dies with it
    pod_uid: str
    kubeconfig: Path
    expires_at: datetime  # as the API server granted it, which may be sooner than asked


def chart_documents(kinds: frozenset[str]) -> list[Json]:
    documents = [d for d in yaml.safe_load_all(MANIFESTS.read_text(encoding="utf-8")) if d]
    return [d for d in documents if d["kind"] in kinds]


def install_identity(target: ServerApply) -> None:
    """Applies the chart's RBAC and policies (idempotent: once per cluster is enough, again is harmless)."""
    documents = chart_documents(IDENTITY_KINDS)
    target.apply(documents)
    log.info("plugin_identity.installed", objects=len(documents))


def plugin_pod(*, node: str) -> Json:
    """The plugin's pod as the chart's DaemonSet would place it on `node` (one container, host network)."""
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {
            "generateName": f"{SERVICE_ACCOUNT}-",
            "namespace": SYSTEM_NS,
            "labels": {"app.kubernetes.io/name": "tessera", RUN_ELSEWHERE_LABEL: "true"},
        },
        "spec": {
            "serviceAccountName": SERVICE_ACCOUNT,
            "nodeName": node,
            "hostNetwork": True,
            "containers": [{"name": "plugin", "image": "registry.invalid/tessera:e2e"}],
        },
    }


def _load(response: Any) -> Json:
    data: Json = json.loads(response.data)
    return data


def mint_token(api: k8s.ApiClient, *, pod: Json, lifetime_s: int = TOKEN_LIFETIME_S) -> tuple[str, datetime]:
    """A TokenRequest bound to the pod, as the kubelet asks for the plugin's projected token."""
    request = {
        "apiVersion": "authentication.k8s.io/v1",
        "kind": "TokenRequest",
        "spec": {
            "expirationSeconds": lifetime_s,
            "boundObjectRef": {
                "apiVersion": "v1",
                "kind": "Pod",
                "name": pod["metadata"]["name"],
                "uid": pod["metadata"]["uid"],
            },
        },
    }
    status = _load(
        k8s.CoreV1Api(api).create_namespaced_service_account_token(
            SERVICE_ACCOUNT,
            SYSTEM_NS,
            body=k8s.AuthenticationV1TokenRequest.model_validate(request),
            _preload_content=False,
        )
    )["status"]
    expires_at = datetime.fromisoformat(status["expirationTimestamp"].replace("Z", "+00:00"))
    asked = datetime.now(UTC) + timedelta(seconds=lifetime_s)
    if expires_at < asked - timedelta(minutes=5):
        log.warning(
            "plugin_identity.token_capped",
            asked_s=lifetime_s,
            expires_at=expires_at.isoformat(),
            hint="the API server's --service-account-max-token-expiration is shorter",
        )
    return str(status["token"]), expires_at


def write_token_kubeconfig(*, admin: Path, token: str, path: Path) -> Path:
    """The admin kubeconfig's cluster (server, CA) with the token as the only user."""
    config = yaml.safe_load(admin.read_text(encoding="utf-8"))
    cluster = config["clusters"][0]
    config["clusters"] = [cluster]
    config["users"] = [{"name": USERNAME, "user": {"token": token}}]
    config["contexts"] = [{"name": "plugin", "context": {"cluster": cluster["name"], "user": USERNAME}}]
    config["current-context"] = "plugin"
    write_atomic(path, yaml.safe_dump(config, sort_keys=False).encode("utf-8"))
    return path


def api_from(kubeconfig: Path) -> k8s.ApiClient:
    from kubernetes import config as k8s_config  # noqa: PLC0415

    configuration = k8s.Configuration()
    k8s_config.load_kube_config(config_file=str(kubeconfig), client_configuration=configuration)  # type: ignore[no-untyped-call]
    return k8s.ApiClient(configuration)


def probe_slice(*, node: str, driver: str = DRIVER_NAME, name: str = "identity-probe") -> k8s.V1ResourceSlice:
    return k8s.V1ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        }
    )


def wait_in_force(sa: k8s.ApiClient, *, timeout_s: float = 30.0) -> None:
    """Until the ClusterRole and the node-slices policy both reach the API server's authorizer and admission
    chain (they take a moment after an apply): a dry-run slice for another node must be refused by the
    policy. RBAC not yet in force refuses without the policy's name; the policy not yet in force admits."""

    def refused() -> bool:
        try:
            k8s.ResourceV1Api(sa).create_resource_slice(body=probe_slice(node=NOWHERE_NODE), dry_run="All")
        except ApiException as e:
            return e.status == 403 and SLICE_POLICY in str(e.body)
        return False

    wait_for(f"the plugin's RBAC and policy {SLICE_POLICY} to be in force", refused, timeout_s=timeout_s)


def issue(
    api: k8s.ApiClient,
    *,
    node: str,
    admin_kubeconfig: Path,
    kubeconfig: Path,
    lifetime_s: int = TOKEN_LIFETIME_S,
    pod_manifest: Json | None = None,
) -> PluginCredentials:
    """Creates the plugin pod on `node` (the Node must exist; `pod_manifest`, default
    `plugin_pod(node=node)`), mints its token, writes `kubeconfig`, and waits until what the token may do is
    in force. `install_identity` must have run on the cluster."""
    manifest = pod_manifest if pod_manifest is not None else plugin_pod(node=node)
    pod = _load(
        k8s.CoreV1Api(api).create_namespaced_pod(
            SYSTEM_NS, body=k8s.V1Pod.model_validate(manifest), _preload_content=False
        )
    )
    name = PodName(pod["metadata"]["name"])
    try:
        token, expires_at = mint_token(api, pod=pod, lifetime_s=lifetime_s)
        write_token_kubeconfig(admin=admin_kubeconfig, token=token, path=kubeconfig)
        with api_from(kubeconfig) as sa:
            wait_in_force(sa)
    except BaseException:
        revoke(api, pod=name)
        raise
    log.info("plugin_identity.issued", node=node, pod=name, expires_at=expires_at.isoformat())
    return PluginCredentials(
        node=node, pod=name, pod_uid=pod["metadata"]["uid"], kubeconfig=kubeconfig, expires_at=expires_at
    )


def report_running(api: k8s.ApiClient, credentials: PluginCredentials) -> None:
    """Marks the plugin pod Running, as a kubelet would once its container started; the stand-in leaves it."""
    pod = _load(k8s.CoreV1Api(api).read_namespaced_pod(credentials.pod, SYSTEM_NS, _preload_content=False))
    k8s.CoreV1Api(api).patch_namespaced_pod_status(
        credentials.pod, SYSTEM_NS, body={"status": running_status(pod, pod_ip=HOST_IP)}
    )


def revoke(api: k8s.ApiClient, *, pod: PodName) -> None:
    """Deletes the plugin pod at once, which invalidates every token bound to it."""
    try:
        k8s.CoreV1Api(api).delete_namespaced_pod(pod, SYSTEM_NS, grace_period_seconds=0)
    except ApiException as e:
        if e.status != 404:
            raise
