"""`tessera explain` agrees with kube-scheduler: for a table of claims on a simulated 2 x H100 node, explain's
prediction (made before the pod exists) matches what the real scheduler then does, and for the claims that do
not fit its reason names the selector, capacity or counter that is in the way."""

from __future__ import annotations

import contextlib
import re
import tempfile
import uuid
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException

from dra_driver.vocabulary.names import DRIVER_NAME, Attr, qualified
from e2e.controlplane.launcher import ControlPlane
from e2e.harness.examples import device_classes
from e2e.harness.kube import get_claim, wait_for
from e2e.harness.published_node import published_node
from e2e.harness.server_apply import ServerApply
from e2e.harness.verdicts import SchedulerVerdict, explain_verdict, scheduler_verdict

pytestmark = [pytest.mark.e2e, pytest.mark.timeout(180), pytest.mark.mixes_families]

NODE = "explain-h100x2"
Json = dict[str, Any]
SIM_NODE = {
    "apiVersion": "sim.tessera.dev/v1",
    "kind": "SimulatedNode",
    "nodeName": NODE,
    "driverVersion": "550.54.15",
    "cudaDriverVersion": "12.4",
    "gpus": [{"product": "H100-80GB-SXM", "count": 2, "migEnabled": False}],
}
ATTR = f'device.attributes["{DRIVER_NAME}"]'


@dataclass(frozen=True, slots=True)
class Published:
    uuids: dict[str, str]  # whole-GPU device name → GPU UUID
    product: str


@pytest.fixture(scope="module")
def published(control_plane: ControlPlane, k8s_api: k8s.ApiClient) -> Iterator[Published]:
    ServerApply(k8s_api).apply(device_classes())
    with tempfile.TemporaryDirectory() as tmp:
        node_file = Path(tmp) / "node.yaml"
        node_file.write_text(yaml.safe_dump(SIM_NODE), encoding="utf-8")
        with published_node(
            k8s_api, node_file=node_file, name=NODE, labels={"tessera.dev/test": "explain"}
        ) as node:
            whole = {
                d["name"]: d for d in node.devices if d["attributes"][qualified(Attr.TYPE)]["string"] == "gpu"
            }
            yield Published(
                uuids={n: d["attributes"][qualified(Attr.UUID)]["string"] for n, d in whole.items()},
                product=next(iter(whole.values()))["attributes"][qualified(Attr.PRODUCT_NAME)]["string"],
            )


# ---- claims and pods --------------------------------------------------------------------------------


def exactly(device_class: str, *, selectors: tuple[str, ...] = (), count: int = 1, **capacity: str) -> Json:
    spec: Json = {"deviceClassName": device_class, "count": count}
    if selectors:
        spec["selectors"] = [{"cel": {"expression": s}} for s in selectors]
    if capacity:
        spec["capacity"] = {"requests": dict(capacity)}
    return spec


def claim_doc(name: str, namespace: str, request: Json) -> Json:
    return {
        "apiVersion": "resource.k8s.io/v1",
        "kind": "ResourceClaim",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"devices": {"requests": [{"name": "gpu", **request}]}},
    }


def pod_doc(name: str, namespace: str, claim: str) -> Json:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {
            # only this node: other tests' nodes must not change the verdict
            "nodeSelector": {"kubernetes.io/hostname": NODE},
            "resourceClaims": [{"name": "gpu", "resourceClaimName": claim}],
            "containers": [{"name": "app", "image": "cuda", "resources": {"claims": [{"name": "gpu"}]}}],
        },
    }


def scheduled(api: k8s.ApiClient, namespace: str, pod: str, claim: str) -> SchedulerVerdict:
    return scheduler_verdict(api, namespace, pod, claim_name=lambda _pod: claim)


def explain(*args: str, kubeconfig: Path) -> tuple[int, Json]:
    return explain_verdict(args, node=NODE, kubeconfig=kubeconfig)


def reasons(verdict: Json) -> list[str]:
    return [
        f"[{d['reason']}] {d['message']}"
        for r in verdict["requests"]
        for d in r["devices"]
        if not d["fits"] and d["reason"] != "class-selector"
    ] + [
        f"[class-selector] {d['message']}" for r in verdict["requests"] for d in r["devices"] if not d["fits"]
    ]


@dataclass
class Workloads:
    api: k8s.ApiClient
    namespace: str
    kubeconfig: Path
    made: list[tuple[str, str]] = field(default_factory=list)  # (pod, claim)

    def claim(self, request: Json) -> str:
        name = f"c-{uuid.uuid4().hex[:6]}"
        body = claim_doc(name, self.namespace, request)
        k8s.ResourceV1Api(self.api).create_namespaced_resource_claim(
            self.namespace, body=k8s.ResourceV1ResourceClaim.model_validate(body)
        )
        self.made.append(("", name))
        return name

    def pod(self, claim: str) -> str:
        name = f"p-{claim}"
        body = k8s.V1Pod.model_validate(pod_doc(name, self.namespace, claim))
        k8s.CoreV1Api(self.api).create_namespaced_pod(self.namespace, body=body)
        self.made.append((name, ""))
        return name

    def predict_then_schedule(self, request: Json) -> tuple[int, Json, SchedulerVerdict]:
        claim = self.claim(request)
        code, verdict = explain(f"{self.namespace}/{claim}", kubeconfig=self.kubeconfig)
        return code, verdict, scheduled(self.api, self.namespace, self.pod(claim), claim)

    def clean(self) -> None:
        """Pods go at once (no kubelet finalizes them); claims once the controller has deallocated them."""
        core, resource = k8s.CoreV1Api(self.api), k8s.ResourceV1Api(self.api)
        for pod, _ in self.made:
            if pod:
                with contextlib.suppress(ApiException):
                    core.delete_namespaced_pod(pod, self.namespace, grace_period_seconds=0)
        for _, claim in self.made:
            if claim:
                with contextlib.suppress(ApiException):
                    resource.delete_namespaced_resource_claim(claim, self.namespace)
        for _, claim in self.made:
            if claim:
                wait_for(f"claim {claim} to go", self._gone(claim), timeout_s=30)

    def _gone(self, claim: str) -> Callable[[], bool]:
        return lambda: get_claim(self.api, self.namespace, claim) is None


@pytest.fixture
def work(
    published: Published, e2e_namespace: str, k8s_api: k8s.ApiClient, control_plane: ControlPlane
) -> Iterator[Workloads]:
    w = Workloads(api=k8s_api, namespace=e2e_namespace, kubeconfig=control_plane.kubeconfig)
    yield w
    w.clean()


# ---- the table ----------------------------------------------------------------------------------------

GPU, VGPU = "gpu.tessera.dev", "vgpu.tessera.dev"
H100 = f'{ATTR}.productName.startsWith("NVIDIA H100")'
H100_BOUND = f'cel.bind(p, {ATTR}.productName, p.startsWith("NVIDIA H100"))'
FITS: list[tuple[str, Json, str]] = [  # id, request, the family of the device the scheduler must pick
    ("whole-gpu", {"exactly": exactly(GPU)}, r"gpu-\d"),
    ("product", {"exactly": exactly(GPU, selectors=(H100,))}, r"gpu-\d"),
    (
        "product-with-cel-bind",
        {"exactly": exactly(GPU, selectors=(H100_BOUND,))},
        r"gpu-\d",
    ),
    ("vgpu-3000Mi-30", {"exactly": exactly(VGPU, memory="3000Mi", cores="30")}, r"gpu-\d-vgpu"),
    ("mig-1g.10gb", {"exactly": exactly("mig-1g.10gb.gpu.tessera.dev")}, r"gpu-\d-mig-1g10gb-\d"),
    (
        "first-available",
        {
            "firstAvailable": [
                {"name": "three", **exactly(GPU, count=3)},
                {"name": "slice", **exactly(VGPU, memory="3000Mi")},
            ]
        },
        r"gpu-\d-vgpu",
    ),
]  # fmt: skip
DOES_NOT_FIT: list[tuple[str, Json, str]] = [  # id, request, what explain's reason must name
    (
        "no-such-product",
        {"exactly": exactly(GPU, selectors=(f'{ATTR}.productName == "NVIDIA B300"',))},
        '[claim-selector] request gpu selector #0 is false: device.attributes["gpu.tessera.dev"].productName '
        '== "NVIDIA B300"',
    ),
    ("vgpu-too-big", {"exactly": exactly(VGPU, memory="100Gi")}, "[capacity-policy] memory: request 100Gi"),
    ("cores-over-100", {"exactly": exactly(VGPU, cores="150")}, "[capacity-policy] cores: request 150"),
    ("mig-profile-not-offered", {"exactly": exactly("mig-1g.5gb.gpu.tessera.dev")}, 'profile == "1g.5gb"'),
    ("three-whole-gpus", {"exactly": exactly(GPU, count=3)}, "needs 3 device(s), 2 fit"),
    (
        "no-such-product-with-cel-bind",
        {"exactly": exactly(GPU, selectors=(f'cel.bind(p, {ATTR}.productName, p == "NVIDIA B300")',))},
        "[claim-selector] request gpu selector #0 is false: cel.bind(p,",
    ),
]  # fmt: skip


@pytest.mark.parametrize(("request_", "family"), [(r, f) for _, r, f in FITS], ids=[i for i, _, _ in FITS])
def test_explain_and_scheduler_agree_it_fits(work: Workloads, request_: Json, family: str) -> None:
    code, verdict, sched = work.predict_then_schedule(request_)
    assert sched.bound, f"the scheduler refused: {sched.message}"
    assert (code, verdict["satisfiable"]) == (0, True), verdict
    [result] = sched.results
    assert re_full(family, result["device"]), result
    # the scheduler's device is one explain says fits, for the same (sub)request
    [req] = [r for r in verdict["requests"] if r["satisfied"]]
    assert req["request"] == result["request"]
    fitting = {d["device"] for d in req["devices"] if d["fits"]}
    assert f"{NODE}/{result['device']}" in fitting
    # and it is the very device explain's walk, in the published order, picks
    assert req["allocated"] == [f"{NODE}/{result['device']}"], (req["allocated"], result)


def test_explain_and_scheduler_agree_on_the_fragmentation_aware_order(work: Workloads) -> None:
    """Whole GPUs come from the last GPU, small MIG placements from the top slot of the first GPU, and a
    4g.40gb still finds slot 0 of that GPU; explain predicts each pick before the pod exists."""
    picks = []
    for request in (
        {"exactly": exactly(GPU)},
        {"exactly": exactly("mig-1g.10gb.gpu.tessera.dev")},
        {"exactly": exactly("mig-4g.40gb.gpu.tessera.dev")},
    ):
        code, verdict, sched = work.predict_then_schedule(request)
        assert sched.bound and code == 0, (sched.message, verdict)
        [result] = sched.results
        assert verdict["requests"][0]["allocated"] == [f"{NODE}/{result['device']}"]
        picks.append(result["device"])
    assert picks == ["gpu-1", "gpu-0-mig-1g10gb-6", "gpu-0-mig-4g40gb-0"]


def test_explain_and_scheduler_agree_on_the_uuid_selector(work: Workloads, published: Published) -> None:
    target = "gpu-1"
    request = {"exactly": exactly(GPU, selectors=(f'{ATTR}.uuid == "{published.uuids[target]}"',))}
    code, verdict, sched = work.predict_then_schedule(request)
    assert sched.bound, sched.message
    assert [r["device"] for r in sched.results] == [target]
    assert code == 0
    assert verdict["requests"][0]["allocated"] == [f"{NODE}/{target}"]


@pytest.mark.parametrize(
    ("request_", "named"), [(r, n) for _, r, n in DOES_NOT_FIT], ids=[i for i, _, _ in DOES_NOT_FIT]
)
def test_explain_and_scheduler_agree_it_does_not_fit(work: Workloads, request_: Json, named: str) -> None:
    code, verdict, sched = work.predict_then_schedule(request_)
    assert not sched.bound
    assert "cannot allocate all claims" in sched.message, sched.message
    assert (code, verdict["satisfiable"]) == (1, False), verdict
    said = reasons(verdict) + [r["problem"] for r in verdict["requests"]]
    assert any(named in s for s in said), said


def test_an_existing_slice_blocks_whole_gpu_use_of_its_gpu(work: Workloads) -> None:
    # a vgpu slice takes one GPU's counters (at its first allocation): one whole GPU is left, not two
    slice_claim = work.claim({"exactly": exactly(VGPU, memory="3000Mi", cores="30")})
    first = scheduled(work.api, work.namespace, work.pod(slice_claim), slice_claim)
    assert first.bound, first.message
    [taken] = first.results
    gpu = taken["device"].removesuffix("-vgpu")
    code, verdict, sched = work.predict_then_schedule({"exactly": exactly(GPU, count=2)})
    assert not sched.bound
    assert (code, verdict["satisfiable"]) == (1, False)
    [req] = verdict["requests"]
    by_device = {d["device"]: d for d in req["devices"]}
    blocked = by_device[f"{NODE}/{gpu}"]
    assert blocked["reason"] == "counter-exhausted", blocked
    assert blocked["message"].startswith(f"counter {gpu}-counters/"), blocked
    other = "gpu-1" if gpu == "gpu-0" else "gpu-0"
    assert by_device[f"{NODE}/{other}"]["fits"]
    # and with the slice gone, both fit again
    work.clean()
    work.made.clear()
    code, verdict, sched = work.predict_then_schedule({"exactly": exactly(GPU, count=2)})
    assert sched.bound and code == 0, (sched.message, verdict)


def test_a_selector_with_a_syntax_error_is_refused_by_both(work: Workloads, tmp_path: Path) -> None:
    broken = f"{ATTR}.productName.startsWith("
    doc = claim_doc("broken", work.namespace, {"exactly": exactly(GPU, selectors=(broken,))})
    # the API server compiles selectors on create: the scheduler never sees this claim
    with pytest.raises(ApiException) as refused:
        body = k8s.ResourceV1ResourceClaim.model_validate(doc)
        k8s.ResourceV1Api(work.api).create_namespaced_resource_claim(work.namespace, body=body)
    assert refused.value.status == 422
    assert "compilation failed" in str(refused.value.body) or "Syntax error" in str(refused.value.body)
    path = tmp_path / "broken.yaml"
    path.write_text(yaml.safe_dump(doc), encoding="utf-8")
    code, verdict = explain(str(path), kubeconfig=work.kubeconfig)
    assert (code, verdict["satisfiable"]) == (1, False)
    assert any("CEL rejected by the API server" in e for e in verdict["errors"]), verdict["errors"]


def re_full(pattern: str, text: str) -> bool:
    return re.fullmatch(pattern, text) is not None
