"""Only what the API server admits changes the cluster: forged AdmissionReviews posted to the webhook's real
HTTPS server make no template (they made one each, in any namespace), while a real Pod created through the
API server gets its template, its claim, and runs; a deleted template is made again for the next Pod; a
template squatting on the conversion's name refuses the Pod with its name and the fix; the webhook's unused
templates are swept after the grace period, `tessera convert`'s (GitOps) ones stay (issue #34)."""

from __future__ import annotations

import base64
import copy
import json
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from admission.convert import names
from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.convert.pod import convert_object
from e2e.harness.kube import Json, get_pod, pod_claim_name, wait_for
from e2e.harness.testbed import SimCluster
from e2e.harness.webhook import (
    RunningWebhook,
    admission_review,
    ca_bundle,
    helm_binary,
    post_reviews,
    start_webhook,
)
from e2e.kubelet_standin.errors import StandInError
from e2e.scenarios.probes import apply, running

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

EXAMPLES = Path(__file__).resolve().parents[2] / "admission" / "examples"
WEBHOOK_NS = "tessera-admission-templates-e2e"
GRACE_S = 3
FORGED = 300


@pytest.fixture(scope="module")
def webhook(bed: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningWebhook]:
    if helm_binary() is None:
        pytest.skip("no helm: run deploy/helm/build-helm.sh")
    log = tmp_path_factory.mktemp("webhook") / "webhook.log"
    running_webhook = start_webhook(
        bed.api, bed.kubectl, bed.plane.kubeconfig, WEBHOOK_NS, log,
        args=[f"--template-grace={GRACE_S}", "--template-resync=1"],
    )  # fmt: skip
    try:
        yield running_webhook
    finally:
        running_webhook.stop()


def example(name: str) -> Json:
    doc: Json = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def templates(bed: SimCluster, namespace: str | None = None) -> dict[tuple[str, str], Json]:
    """The conversion's templates (named tessera-*) in `namespace`, or in every namespace."""
    api = k8s.ResourceV1Api(bed.api)
    raw: Any = (
        api.list_resource_claim_template_for_all_namespaces(_preload_content=False)
        if namespace is None
        else api.list_namespaced_resource_claim_template(namespace, _preload_content=False)
    )
    return {
        (t["metadata"]["namespace"], t["metadata"]["name"]): t
        for t in json.loads(raw.data).get("items") or []
        if t["metadata"]["name"].startswith("tessera-")
    }


def referenced(pod: Json) -> str:
    (claim,) = [c for c in pod["spec"]["resourceClaims"] if c["name"].startswith(names.CLAIM_PREFIX)]
    return str(claim["resourceClaimTemplateName"])


def test_forged_reviews_make_no_template_anywhere(bed: SimCluster, ns: str, webhook: RunningWebhook) -> None:
    before = templates(bed)
    pod = example("hami-default-use.yaml")
    reviews = []
    for i in range(FORGED):
        forged = copy.deepcopy(pod)
        forged["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpumem"] = (
            1000 + i
        )  # distinct asks
        reviews.append(admission_review(forged, "kube-system" if i % 2 else ns))
    answers = post_reviews(webhook.port, base64.b64decode(ca_bundle(bed.api)), reviews)
    assert all(a["response"]["allowed"] and a["response"]["patch"] for a in answers)  # still answered
    time.sleep(3)  # three resyncs of the reconciler, and its watches' events
    made = templates(bed).keys() - before.keys()  # those before may be swept meanwhile (an earlier module's)
    assert not made, f"a forged review made a template: {sorted(made)}"


def test_a_real_pod_gets_its_template_and_claim_and_runs(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    apply(bed, ns, [example("hami-default-use.yaml")])
    pod = running(bed, ns, "gpu-pod")
    assert pod["metadata"]["labels"][names.CONVERTED_LABEL[0]] == names.CONVERTED_LABEL[1]
    template = templates(bed, ns)[(ns, referenced(pod))]
    labels = template["metadata"]["labels"]
    assert labels[names.MADE_BY[0]] == names.MADE_BY[1] and labels[names.MANAGED_BY[0]] == names.MANAGED_BY[1]
    assert pod_claim_name(pod, "tessera-gpu-0")


def test_a_deleted_template_is_made_again_for_the_next_pod(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    first = example("volcano-vgpu.yaml")
    apply(bed, ns, [first])
    name = referenced(running(bed, ns, "test1"))
    k8s.CoreV1Api(bed.api).delete_namespaced_pod("test1", ns, grace_period_seconds=0)
    wait_for("the first pod to go", lambda: get_pod(bed.api, ns, "test1") is None)
    k8s.ResourceV1Api(bed.api).delete_namespaced_resource_claim_template(name, ns)
    wait_for("the template to go", lambda: (ns, name) not in templates(bed, ns))
    second = copy.deepcopy(first)
    second["metadata"]["name"] = "test2"
    apply(bed, ns, [second])
    assert referenced(running(bed, ns, "test2")) == name and (ns, name) in templates(bed, ns)


def test_a_squatted_template_refuses_the_pod_naming_it_and_the_fix(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    pod = example("hami-memory-fraction.yaml")
    # the name the webhook gives: a server-side dry run is admitted like a create, and writes nothing
    dry = json.loads(bed.kubectl.run("create", "--dry-run=server", "-o", "json", f"--namespace={ns}",
                                     "-f", "-", stdin=yaml.safe_dump(pod)))  # fmt: skip
    name = referenced(dry)
    assert (ns, name) not in templates(bed, ns)
    squatter = {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaimTemplate",
        "metadata": {"name": name, "labels": {"app": "mine"}},
        "spec": {"spec": {"devices": {"requests": [{"name": "gpu", "exactly": {
            "deviceClassName": "vgpu.tessera.dev", "allocationMode": "ExactCount", "count": 1}}]}}},
    }  # fmt: skip
    apply(bed, ns, [squatter])

    def refusal() -> str | None:
        try:
            apply(bed, ns, [pod])
        except StandInError as e:
            return str(e)
        k8s.CoreV1Api(bed.api).delete_namespaced_pod(pod["metadata"]["name"], ns, grace_period_seconds=0)
        wait_for("the pod to go", lambda: get_pod(bed.api, ns, pod["metadata"]["name"]) is None)
        return None  # the webhook's watch had not seen the squatter yet

    message = wait_for("the pod to be refused", refusal, timeout_s=10)
    assert f"ResourceClaimTemplate {name} in namespace {ns} exists" in message
    assert "Delete or rename that template" in message and "lacks the label" in message
    assert templates(bed, ns)[(ns, name)]["metadata"]["labels"] == {"app": "mine"}  # left alone


def test_unused_webhook_templates_are_swept_gitops_ones_stay(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    # `tessera convert` for a GitOps repository: its template applied, no pod uses it
    options = Options(known_products(), replace_schedulers=("volcano",))
    gitops = convert_object(example("hami-exclusive-card.yaml"), options).manifests()[0]
    apply(bed, ns, [gitops])
    apply(bed, ns, [example("hami-default-use.yaml")])
    made = referenced(running(bed, ns, "gpu-pod"))
    k8s.CoreV1Api(bed.api).delete_namespaced_pod("gpu-pod", ns, grace_period_seconds=0)
    wait_for("the pod to go", lambda: get_pod(bed.api, ns, "gpu-pod") is None)
    started = time.monotonic()
    wait_for("the unused template to be swept", lambda: (ns, made) not in templates(bed, ns), timeout_s=30)
    assert time.monotonic() - started >= GRACE_S - 1
    assert (ns, gitops["metadata"]["name"]) in templates(bed, ns)


def test_a_pod_a_later_admission_step_refuses_leaves_no_template(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    """The webhook mutates first; a ValidatingAdmissionPolicy then refuses the Pod. Templates made while
    answering outlived such Pods; made by the reconciler, they exist only for Pods that were admitted."""
    policy = f"refuse-in-{ns}"
    admission = k8s.AdmissionregistrationV1Api(bed.api)
    admission.create_validating_admission_policy(k8s.V1ValidatingAdmissionPolicy.model_validate({
        "metadata": {"name": policy},
        "spec": {
            "matchConstraints": {"resourceRules": [{"apiGroups": [""], "apiVersions": ["v1"],
                                                    "operations": ["CREATE"], "resources": ["pods"]}]},
            "validations": [{"expression": "false", "message": "refused by a later admission step"}],
        },
    }))  # fmt: skip
    only_here = {"namespaceSelector": {"matchLabels": {"kubernetes.io/metadata.name": ns}}}
    admission.create_validating_admission_policy_binding(k8s.V1ValidatingAdmissionPolicyBinding.model_validate({
        "metadata": {"name": policy},
        "spec": {"policyName": policy, "validationActions": ["Deny"], "matchResources": only_here},
    }))  # fmt: skip
    try:
        pod = example("hami-card-type.yaml")
        # a Pod the webhook leaves alone finds when the policy is in force: a GPU Pod admitted before then
        # would rightly get its template, which outlives it by the grace period
        plain = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {"name": "no-gpu"},
            "spec": {"containers": [{"name": "c", "image": pod["spec"]["containers"][0]["image"]}]},
        }

        def refused(what: Json) -> bool:
            try:
                apply(bed, ns, [what])
            except StandInError as e:
                assert "refused by a later admission step" in str(e)
                return True
            k8s.CoreV1Api(bed.api).delete_namespaced_pod(what["metadata"]["name"], ns, grace_period_seconds=0)
            return False  # the policy was not in force yet

        wait_for("the policy to refuse a pod", lambda: refused(plain), timeout_s=20)
        for _ in range(20):  # a few, as a controller retrying would
            assert refused(pod)
        time.sleep(3)  # three resyncs of the reconciler
        assert templates(bed, ns) == {}
    finally:
        admission.delete_validating_admission_policy_binding(policy)
        admission.delete_validating_admission_policy(policy)
