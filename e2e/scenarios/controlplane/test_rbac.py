"""The chart's RBAC and slice-writer policy, for real: the node plugin runs with a token bound to a pod of the
chart's ServiceAccount (not as admin), publishes its slices, prepares a claim the real scheduler allocated
and writes its status; the same identity is refused everything else.

The identity is e2e.harness.plugin_identity's, the one every simulated node's plugin runs with: the plugin pod
is an object only (the stand-in leaves it, SimNode runs the daemon), bound to the node so the TokenRequest API
puts the node's name into the token (`authentication.kubernetes.io/node-name`), which the slice-writer policy
and the `associated-node:` verbs read."""

from __future__ import annotations

import json
import re
import shutil
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta
from pathlib import Path
from typing import Any

import pytest
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.names import DRIVER_NAME, Cap
from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.nodes import create_node, delete_node
from e2e.controlplane.settings import RELEASE
from e2e.harness.kube import (
    WaitTimeoutError,
    delete_namespace_contents,
    get_claim,
    get_pod,
    wait_for,
    wait_running,
)
from e2e.harness.node import NODES_DIR, SimNode, node_kubeconfig, node_name_of
from e2e.harness.plugin_identity import (
    SERVICE_ACCOUNT,
    SLICE_POLICY,
    SYSTEM_NS,
    TOKEN_LIFETIME_S,
    PluginCredentials,
    api_from,
    chart_documents,
    install_identity,
    issue,
    revoke,
)
from e2e.harness.server_apply import ServerApply

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(240)]

NODE_FILE = NODES_DIR / "h100x8.yaml"
NODE = node_name_of(NODE_FILE)
OTHER_NODE = "some-other-node"
POLICY = SLICE_POLICY
MERGE = "application/merge-patch+json"
Json = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PluginIdentity:
    api: k8s.ApiClient  # the plugin's own credentials: the pod-bound service account token
    kubeconfig: Path
    namespace: str  # where the workload claims live
    node: SimNode
    credentials: PluginCredentials


def slice_body(*, node: str, driver: str = DRIVER_NAME, name: str | None = None) -> k8s.V1ResourceSlice:
    return k8s.V1ResourceSlice.model_validate(
        {
            "apiVersion": "resource.k8s.io/v1",
            "kind": "ResourceSlice",
            "metadata": {"name": name or f"rbac-{uuid.uuid4().hex[:8]}"},
            "spec": {
                "driver": driver,
                "nodeName": node,
                "pool": {"name": node, "generation": 1, "resourceSliceCount": 1},
                "devices": [{"name": "gpu-0"}],
            },
        }
    )


def denied(call: Callable[[], object]) -> ApiException:
    with pytest.raises(ApiException) as raised:
        call()
    assert raised.value.status in (403, 422), raised.value.body
    return raised.value


def wait_wiped(node: SimNode) -> None:
    """The stand-in wipes the node's slices at its start, as a kubelet does; a wipe racing the plugin's first
    publish makes the publisher take the vanished slices for dropped fields and degrade (reported)."""
    log = Path(node.standin.log) if node.standin else None
    wait_for(
        "the stand-in's start-up wipe",
        lambda: (
            log is not None and log.exists() and "standin.wiped_slices" in log.read_text(errors="replace")
        ),
        timeout_s=30,
    )


@pytest.fixture(scope="module")
def identity(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> Iterator[PluginIdentity]:
    target = ServerApply(k8s_api)
    target.apply(chart_documents(frozenset({"DeviceClass"})))
    install_identity(target)
    core = k8s.CoreV1Api(k8s_api)
    namespace = f"rbac-{uuid.uuid4().hex[:8]}"
    core.create_namespace(body=k8s.V1Namespace.model_validate({"metadata": {"name": namespace}}))
    root = Path(tempfile.mkdtemp(prefix="tsr-rbac-"))  # short: socket paths
    create_node(k8s_api, name=NODE)
    node = SimNode(
        api=k8s_api,
        node_file=NODE_FILE,
        root=root,
        admin_kubeconfig=control_plane.kubeconfig,  # names the cluster; the plugin gets the token only
        node_kubeconfig=node_kubeconfig(control_plane, NODE),
    )
    sa: k8s.ApiClient | None = None
    try:
        credentials = node.issue_identity()
        sa = api_from(credentials.kubeconfig)
        node.library_path.parent.mkdir(parents=True, exist_ok=True)
        node.library_path.write_bytes(b"")  # the stand-in only checks the mount source exists
        node.start_standin()
        wait_wiped(node)
        node.start_plugin()
        node.wait_for_slices(timeout_s=60)
        yield PluginIdentity(
            api=sa, kubeconfig=credentials.kubeconfig, namespace=namespace, node=node, credentials=credentials
        )
        delete_namespace_contents(k8s_api, namespace)  # unprepared by the plugin while it still runs
    finally:
        node.stop(delete_node_object=False)  # and deletes the plugin pod, revoking its token
        if sa is not None:
            sa.close()  # type: ignore[no-untyped-call]
        core.delete_namespace(namespace)
        delete_node(k8s_api, name=NODE)
        shutil.rmtree(root, ignore_errors=True)


# ---- what the plugin needs, it has ---------------------------------------------------------------------


def whoami(api: k8s.ApiClient) -> Json:
    review: Any = k8s.AuthenticationV1Api(api).create_self_subject_review(
        body=k8s.V1SelfSubjectReview.model_validate(
            {"apiVersion": "authentication.k8s.io/v1", "kind": "SelfSubjectReview"}
        ),
        _preload_content=False,
    )
    user: Json = json.loads(review.data)["status"]["userInfo"]
    return user


def test_the_token_names_the_service_account_and_the_node(identity: PluginIdentity) -> None:
    user = whoami(identity.api)
    assert user["username"] == f"system:serviceaccount:{SYSTEM_NS}:{SERVICE_ACCOUNT}"
    assert user["extra"]["authentication.kubernetes.io/node-name"] == [NODE]
    assert "system:masters" not in user["groups"]


def test_the_token_lasts_a_day(identity: PluginIdentity) -> None:
    # the launcher sets no --service-account-max-token-expiration, so nothing shortens the 24 h asked for
    left = identity.credentials.expires_at - datetime.now(UTC)
    asked = timedelta(seconds=TOKEN_LIFETIME_S)
    assert asked - timedelta(hours=1) < left <= asked


def test_the_plugin_pod_is_on_the_node_and_not_run_by_the_stand_in(
    identity: PluginIdentity, k8s_api: k8s.ApiClient
) -> None:
    pod = get_pod(k8s_api, SYSTEM_NS, identity.credentials.pod)
    assert pod is not None
    assert pod["spec"]["nodeName"] == NODE
    assert pod["spec"]["serviceAccountName"] == SERVICE_ACCOUNT
    assert pod["status"]["phase"] == "Running"  # reported by SimNode, which runs the daemon
    assert identity.node.runtime(namespace=SYSTEM_NS, name=identity.credentials.pod) is None
    assert not list(identity.node.runtime_dir.glob("*.json")), "the stand-in ran the plugin pod"


def test_deleting_the_plugin_pod_revokes_its_token(
    identity: PluginIdentity, control_plane: ControlPlane, k8s_api: k8s.ApiClient
) -> None:
    spare = issue(
        k8s_api,
        node=NODE,
        admin_kubeconfig=control_plane.kubeconfig,
        kubeconfig=identity.node.root / "spare.kubeconfig",
    )
    with api_from(spare.kubeconfig) as api:
        assert whoami(api)["extra"]["authentication.kubernetes.io/node-name"] == [NODE]
        revoke(k8s_api, pod=spare.pod)

        def rejected() -> bool:
            try:
                whoami(api)
            except ApiException as e:
                return bool(e.status == 401)
            return False

        wait_for("the API server to reject the token of a deleted pod", rejected, timeout_s=30)


def test_the_plugin_publishes_its_slices(identity: PluginIdentity) -> None:
    slices = identity.node.slices()
    assert slices, "no slices of the node"
    assert {s["spec"]["nodeName"] for s in slices} == {NODE}
    devices = {d["name"] for s in slices for d in s["spec"].get("devices") or []}
    wanted = {"gpu-0", "gpu-3-mig-1g10gb-0"} | ({"gpu-7-vgpu"} if RELEASE.mixes_families() else set())
    assert wanted <= devices, sorted(devices)
    log_file = Path(identity.node.plugin.log if identity.node.plugin else "")

    def published() -> str | None:
        text = log_file.read_text(errors="replace")
        return text if "publisher.published" in text else None

    log = wait_for("the publisher's log line", published, timeout_s=10)
    assert "publisher.degraded" not in log
    # a word, not a substring: the log's timestamps (e.g. "42.964036Z") may hold the digits 403
    assert re.search(r"\b403\b", log) is None and "Forbidden" not in log


def diagnosis(identity: PluginIdentity, admin: k8s.ApiClient, pod: str, claim: str) -> str:
    node = identity.node
    logs = [Path(r.log) for r in (node.plugin, node.standin) if r is not None]
    tails = "\n".join(
        f"--- {p.name}\n" + "\n".join(p.read_text(errors="replace").splitlines()[-15:]) for p in logs
    )
    return (
        f"pod status {(get_pod(admin, identity.namespace, pod) or {}).get('status')}\n"
        f"claim status {(get_claim(admin, identity.namespace, claim) or {}).get('status')}\n{tails}"
    )


@pytest.mark.mixes_families
def test_the_plugin_prepares_a_scheduled_claim_and_writes_its_status(
    identity: PluginIdentity, k8s_api: k8s.ApiClient
) -> None:
    ns = identity.namespace
    claim = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": "slice", "namespace": ns},
        "spec": {
            "devices": {
                "requests": [
                    {
                        "name": "gpu",
                        "exactly": {
                            "deviceClassName": "vgpu.tessera.dev",
                            "capacity": {"requests": {Cap.MEMORY: "3000Mi", Cap.CORES: "30"}},
                        },
                    }
                ]
            }
        },
    }
    pod = {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": "uses-slice", "namespace": ns},
        "spec": {
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": "slice"}],
            "containers": [{"name": "app", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }
    k8s.ResourceV1Api(k8s_api).create_namespaced_resource_claim(
        ns, body=k8s.ResourceV1ResourceClaim.model_validate(claim)
    )
    k8s.CoreV1Api(k8s_api).create_namespaced_pod(ns, body=k8s.V1Pod.model_validate(pod))
    try:
        wait_running(k8s_api, ns, "uses-slice", timeout_s=60)
    except WaitTimeoutError as e:
        raise AssertionError(f"{e}: {diagnosis(identity, k8s_api, 'uses-slice', 'slice')}") from e

    def described() -> Json | None:
        got = get_claim(k8s_api, ns, "slice")
        devices = ((got or {}).get("status") or {}).get("devices") or []
        return got if any(d["driver"] == DRIVER_NAME for d in devices) else None

    got = wait_for("the plugin to write status.devices", described, timeout_s=30)
    [result] = got["status"]["allocation"]["devices"]["results"]
    [status] = [d for d in got["status"]["devices"] if d["driver"] == DRIVER_NAME]
    assert (status["pool"], status["device"]) == (NODE, result["device"])
    assert result["device"].endswith("-vgpu")
    assert status.get("shareID") == result.get("shareID")
    assert status.get("conditions"), status


def test_the_plugin_may_create_events_about_its_node(identity: PluginIdentity) -> None:
    # the same call the publisher makes when it has to degrade (no other path of the plugin writes events)
    now = datetime.now(UTC)
    event = k8s.CoreV1Event(
        metadata=k8s.V1ObjectMeta(generate_name=f"{NODE}.tessera-"),
        involved_object=k8s.V1ObjectReference(api_version="v1", kind="Node", name=NODE),
        reason="RbacCheck",
        message="the node plugin's identity may create events",
        type="Normal",
        source=k8s.V1EventSource(component=DRIVER_NAME, host=NODE),
        first_timestamp=now,
        last_timestamp=now,
        count=1,
    )
    made = k8s.CoreV1Api(identity.api).create_namespaced_event(namespace="default", body=event)
    assert made.reason == "RbacCheck"


# ---- and nothing more ----------------------------------------------------------------------------------


def test_slices_of_another_node_are_refused(identity: PluginIdentity, k8s_api: k8s.ApiClient) -> None:
    resource = k8s.ResourceV1Api(identity.api)
    e = denied(lambda: resource.create_resource_slice(body=slice_body(node=OTHER_NODE)))
    assert f"on node {NODE} may only write ResourceSlices of that node, not of node {OTHER_NODE}" in str(
        e.body
    )
    # one that exists (written by an admin) may not be deleted or changed either
    theirs: Any = k8s.ResourceV1Api(k8s_api).create_resource_slice(body=slice_body(node=OTHER_NODE))
    try:
        name = theirs.metadata.name
        e = denied(lambda: resource.delete_resource_slice(name))
        assert POLICY in str(e.body)
        theirs.spec.pool.generation = 2
        e = denied(lambda: resource.replace_resource_slice(name, body=theirs))
        assert POLICY in str(e.body)
    finally:
        k8s.ResourceV1Api(k8s_api).delete_resource_slice(theirs.metadata.name)


def test_slices_of_another_driver_are_refused(identity: PluginIdentity) -> None:
    resource = k8s.ResourceV1Api(identity.api)
    body = slice_body(node=NODE, driver="other.example.com")
    e = denied(lambda: resource.create_resource_slice(body=body, dry_run="All"))
    assert "may only write ResourceSlices of driver gpu.tessera.dev, not other.example.com" in str(e.body)
    # the same slice for our driver on our node is allowed: the refusal is the policy's, not RBAC's
    resource.create_resource_slice(body=slice_body(node=NODE), dry_run="All")


def test_pods_secrets_nodes_and_device_classes_are_refused(identity: PluginIdentity) -> None:
    core = k8s.CoreV1Api(identity.api)
    denied(lambda: core.delete_namespaced_pod("uses-slice", identity.namespace))
    denied(lambda: core.list_namespaced_pod(identity.namespace))
    denied(core.list_secret_for_all_namespaces)
    denied(lambda: core.read_namespaced_secret("anything", SYSTEM_NS))
    # it reads its Node (another GPU device plugin's nvidia.com/gpu there stops publishing), never lists them
    core.read_node(NODE)
    denied(core.list_node)
    denied(lambda: core.patch_node(NODE, {"metadata": {"labels": {"x": "y"}}}))
    resource = k8s.ResourceV1Api(identity.api)
    device_class = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "DeviceClass",
        "metadata": {"name": "sneaky.tessera.dev"},
        "spec": {"selectors": [{"cel": {"expression": "true"}}]},
    }
    denied(lambda: resource.create_device_class(body=k8s.V1DeviceClass.model_validate(device_class)))
    denied(lambda: resource.delete_device_class("vgpu.tessera.dev"))
    denied(lambda: resource.delete_namespaced_resource_claim("slice", identity.namespace))
    denied(resource.delete_collection_resource_slice)


def allocated_claim(admin: k8s.ApiClient, namespace: str, *, driver: str, node: str) -> str:
    """A claim an admin allocated (as a scheduler would) to `driver`'s device on `node`."""
    resource = k8s.ResourceV1Api(admin)
    name = f"alloc-{uuid.uuid4().hex[:6]}"
    body = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            "devices": {"requests": [{"name": "gpu", "exactly": {"deviceClassName": "gpu.tessera.dev"}}]}
        },
    }
    resource.create_namespaced_resource_claim(
        namespace, body=k8s.ResourceV1ResourceClaim.model_validate(body)
    )
    allocation = {
        "devices": {"results": [{"request": "gpu", "driver": driver, "pool": node, "device": "gpu-0"}]},
        "nodeSelector": {
            "nodeSelectorTerms": [
                {"matchFields": [{"key": "metadata.name", "operator": "In", "values": [node]}]}
            ]
        },
    }
    resource.patch_namespaced_resource_claim_status(
        name, namespace, body={"status": {"allocation": allocation}}, _content_type=MERGE
    )
    return name


def device_status(driver: str, node: str) -> Json:
    return {"status": {"devices": [{"driver": driver, "pool": node, "device": "gpu-0"}]}}


@pytest.mark.skipif(
    not RELEASE.knows("DRAResourceClaimGranularStatusAuthorization"),
    reason=f"Kubernetes {RELEASE.version} has no per-driver authorization of claim status (from 1.36 on): "
    "any identity that may update resourceclaims/status writes any driver's status.devices",
)
def test_claim_status_only_for_our_driver_on_our_node(
    identity: PluginIdentity, k8s_api: k8s.ApiClient
) -> None:
    ns, resource = identity.namespace, k8s.ResourceV1Api(identity.api)

    def patch(name: str, body: Json) -> object:
        return resource.patch_namespaced_resource_claim_status(name, ns, body=body, _content_type=MERGE)

    ours = allocated_claim(k8s_api, ns, driver=DRIVER_NAME, node=NODE)
    patch(ours, device_status(DRIVER_NAME, NODE))  # the control: allowed
    foreign = allocated_claim(k8s_api, ns, driver="other.example.com", node=NODE)
    e = denied(lambda: patch(foreign, device_status("other.example.com", NODE)))
    assert "resourceclaims/driver" in str(e.body)
    elsewhere = allocated_claim(k8s_api, ns, driver=DRIVER_NAME, node=OTHER_NODE)
    e = denied(lambda: patch(elsewhere, device_status(DRIVER_NAME, OTHER_NODE)))
    assert "resourceclaims/driver" in str(e.body)
    # nor may it allocate or reserve: that is the scheduler's (resourceclaims/binding)
    e = denied(
        lambda: patch(ours, {"status": {"reservedFor": [{"resource": "pods", "name": "x", "uid": "1"}]}})
    )
    assert "resourceclaims/binding" in str(e.body)
