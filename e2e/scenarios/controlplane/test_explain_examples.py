"""`tessera explain` agrees with kube-scheduler on every claim users are shown: each ResourceClaimTemplate and
ResourceClaim in deploy/examples/, on each node the demo uses (8 x H100; 2 x A100 + 2 x L4).

Per (claim, node): explain's prediction is taken before the pod exists, then the example's own pod (pinned
to the node by nodeSelector) is created and the scheduler decides. Every case starts on an empty node: the
previous case's pods and claims are gone (deallocated) before the next begins, so each example is judged
the way its comment describes it, and explain and the scheduler see the same (empty) set of allocations."""

from __future__ import annotations

import contextlib
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from e2e.controlplane.launcher import ControlPlane
from e2e.harness.examples import device_classes, example_files, load, pinned
from e2e.harness.kube import list_claims, pod_claim_name
from e2e.harness.published_node import NODES_DIR, PublishedNode, published_node
from e2e.harness.server_apply import ServerApply
from e2e.harness.verdicts import SchedulerVerdict, explain_verdict, scheduler_verdict

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), pytest.mark.mixes_families]

Json = dict[str, Any]
H100, MIXED = "sim-h100x8", "sim-mixed-a100-l4"  # the names the examples (gpu-by-uuid) were written for
NODE_FILES = {H100: NODES_DIR / "h100x8.yaml", MIXED: NODES_DIR / "mixed-a100-l4.yaml"}
CLAIM_KINDS = ("ResourceClaimTemplate", "ResourceClaim")

# What each example is meant to do on each node (from the examples' comments); the test checks that explain
# and the scheduler agree with each other AND with this, so both being wrong the same way is caught too.
EXPECTED: dict[tuple[str, str], bool] = {
    ("h100-gpu", H100): True,
    ("h100-gpu", MIXED): False,  # no H100 there
    ("gpu-by-uuid", H100): False,  # the UUID is GPU 0 of the mixed node
    ("gpu-by-uuid", MIXED): True,
    ("not-a100-or-h100", H100): False,
    ("not-a100-or-h100", MIXED): True,  # an L4
    ("two-whole-gpus", H100): True,
    ("two-whole-gpus", MIXED): True,
    ("vgpu-3000mi-30", H100): True,
    ("vgpu-3000mi-30", MIXED): True,
    ("mig-mix", H100): True,
    ("mig-mix", MIXED): False,  # the A100s have MIG mode off, the L4s cannot do MIG
    ("shared-vgpu", H100): True,
    ("shared-vgpu", MIXED): True,
    ("mig-or-vgpu", H100): True,  # as MIG
    ("mig-or-vgpu", MIXED): True,  # as the vGPU fallback
    ("mps-30", H100): True,
    ("mps-30", MIXED): True,  # on an A100 or an L4: both are Volta or newer
    ("mps-70", H100): True,
    ("mps-70", MIXED): True,
    ("gpus-one-pcie-switch", H100): True,
    ("gpus-one-pcie-switch", MIXED): False,  # that node file says nothing of its PCIe topology
    ("four-nvlink-gpus", H100): True,  # GPUs 4-7: the NVSwitch domain, NUMA node 1
    ("four-nvlink-gpus", MIXED): False,  # no NVLink there
}


@dataclass(frozen=True, slots=True)
class Example:
    file: Path
    claim: Json  # the ResourceClaimTemplate or ResourceClaim
    pod: Json  # the first pod of the same file that uses it

    @property
    def name(self) -> str:
        return str(self.claim["metadata"]["name"])


def _entries(pod: Json, claim: Json) -> list[str]:
    """The names under which `pod` refers to `claim` in spec.resourceClaims."""
    key = "resourceClaimTemplateName" if claim["kind"] == "ResourceClaimTemplate" else "resourceClaimName"
    refs = pod["spec"].get("resourceClaims") or []
    return [ref["name"] for ref in refs if ref.get(key) == claim["metadata"]["name"]]


def examples() -> list[Example]:
    found = []
    for path in example_files():
        docs = load(path)
        for claim in (d for d in docs if d.get("kind") in CLAIM_KINDS):
            pods = [d for d in docs if d.get("kind") == "Pod" and _entries(d, claim)]
            assert pods, f"{path.name}: no pod uses {claim['kind']} {claim['metadata']['name']}"
            found.append(Example(file=path, claim=claim, pod=pods[0]))
    return found


EXAMPLES = examples()
CASES = [(e, node) for e in EXAMPLES for node in NODE_FILES]


def test_the_table_covers_every_example_claim_on_every_node() -> None:
    assert {(e.name, n) for e, n in CASES} == set(EXPECTED)


@pytest.fixture(scope="module")
def nodes(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> Iterator[dict[str, PublishedNode]]:
    ServerApply(k8s_api).apply(device_classes())
    with (
        published_node(k8s_api, node_file=NODE_FILES[H100], name=H100) as h100,
        published_node(k8s_api, node_file=NODE_FILES[MIXED], name=MIXED) as mixed,
    ):
        yield {H100: h100, MIXED: mixed}


# ---- explain, the scheduler, and cleaning up ------------------------------------------------------------


def explain(claim: str, *, node: str, kubeconfig: Path) -> tuple[int, Json]:
    code, verdict = explain_verdict([claim], node=node, kubeconfig=kubeconfig)
    assert verdict, f"explain printed nothing (exit {code})"
    return code, verdict


def scheduled(api: k8s.ApiClient, namespace: str, pod: str, entry: str) -> SchedulerVerdict:
    """The scheduler's decision on `pod`, with the allocation of the pod's claim `entry`."""
    return scheduler_verdict(api, namespace, pod, claim_name=lambda got: pod_claim_name(got, entry))


def empty_namespace(api: k8s.ApiClient, namespace: str) -> None:
    """Pods go at once (no kubelet finalizes them); then wait until the claims, generated ones included,
    are deallocated and gone, so the next case starts on an empty node."""
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    core.delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    with contextlib.suppress(ApiException):
        resource.delete_collection_namespaced_resource_claim_template(namespace)
    deadline = time.monotonic() + 30
    while claims := list_claims(api, namespace):
        for c in claims:
            with contextlib.suppress(ApiException):
                resource.delete_namespaced_resource_claim(c["metadata"]["name"], namespace)
        assert time.monotonic() < deadline, f"claims left in {namespace}: {[c['metadata'] for c in claims]}"
        time.sleep(0.1)


@pytest.fixture
def namespace(nodes: dict[str, PublishedNode], e2e_namespace: str, k8s_api: k8s.ApiClient) -> Iterator[str]:
    yield e2e_namespace
    empty_namespace(k8s_api, e2e_namespace)


def create(api: k8s.ApiClient, namespace: str, doc: Json) -> None:
    resource, body = k8s.ResourceV1Api(api), {**doc, "metadata": {**doc["metadata"], "namespace": namespace}}
    if doc["kind"] == "ResourceClaimTemplate":
        template = k8s.V1ResourceClaimTemplate.model_validate(body)
        resource.create_namespaced_resource_claim_template(namespace, body=template)
    elif doc["kind"] == "ResourceClaim":
        resource.create_namespaced_resource_claim(
            namespace, body=k8s.ResourceV1ResourceClaim.model_validate(body)
        )
    else:
        k8s.CoreV1Api(api).create_namespaced_pod(namespace, body=k8s.V1Pod.model_validate(body))


def predict(
    example: Example, *, namespace: str, node: str, api: k8s.ApiClient, tmp: Path, kubeconfig: Path
) -> tuple[int, Json]:
    """A template is explained from its file, as a user would before applying it; a ResourceClaim from the
    cluster (namespace/name), once it exists."""
    if example.claim["kind"] == "ResourceClaimTemplate":
        path = tmp / f"{example.name}.yaml"
        path.write_text(yaml.safe_dump(example.claim), encoding="utf-8")
        return explain(str(path), node=node, kubeconfig=kubeconfig)
    create(api, namespace, example.claim)
    return explain(f"{namespace}/{example.name}", node=node, kubeconfig=kubeconfig)


# ---- the check -------------------------------------------------------------------------------------------


@pytest.mark.parametrize(("example", "node"), CASES, ids=[f"{e.name}@{n}" for e, n in CASES])
def test_explain_agrees_with_the_scheduler_on_the_example(
    example: Example,
    node: str,
    namespace: str,
    k8s_api: k8s.ApiClient,
    control_plane: ControlPlane,
    tmp_path: Path,
) -> None:
    code, verdict = predict(
        example,
        namespace=namespace,
        node=node,
        api=k8s_api,
        tmp=tmp_path,
        kubeconfig=control_plane.kubeconfig,
    )
    assert code in (0, 1), verdict
    assert not verdict["errors"], verdict["errors"]
    if example.claim["kind"] == "ResourceClaimTemplate":
        create(k8s_api, namespace, example.claim)
    pod = pinned(example.pod, node)
    create(k8s_api, namespace, pod)
    [entry] = _entries(pod, example.claim)
    sched = scheduled(k8s_api, namespace, pod["metadata"]["name"], entry)

    assert verdict["satisfiable"] == sched.bound, (sched.message, verdict)
    assert code == (0 if sched.bound else 1)
    assert sched.bound == EXPECTED[(example.name, node)], sched.message
    if not sched.bound:
        assert "cannot allocate all claims" in sched.message, sched.message
        return
    # every device the scheduler allocated is one explain says fits, for the same (sub)request
    fitting = {r["request"]: {d["device"] for d in r["devices"] if d["fits"]} for r in verdict["requests"]}
    satisfied = {r["request"] for r in verdict["requests"] if r["satisfied"]}
    assert sched.results
    # and for firstAvailable, the subrequest the scheduler used is one explain found satisfiable
    assert {r["request"] for r in sched.results} <= satisfied, (sched.results, satisfied)
    for result in sched.results:
        assert result["request"] in fitting, (result, sorted(fitting))
        assert f"{result['pool']}/{result['device']}" in fitting[result["request"]], (result, fitting)
        assert result["pool"] == node
