"""HAMi's and Volcano's pod YAML, unchanged, on Tessera: the real kube-apiserver calls `tessera webhook` over
TLS (the certificate the webhook made itself and patched into the chart's MutatingWebhookConfiguration), the
pods are rewritten to claim templates, and they run on the simulated nodes with the limits they asked for;
invalid requests are refused with the field and the fix."""

from __future__ import annotations

import base64
import copy
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from admission.convert import names
from dra_driver.core.profiles import find_product
from dra_driver.libtessera.names import HamiEnv
from dra_driver.vocabulary.names import Attr, Cap
from dra_driver.vocabulary.quantity import parse_quantity
from e2e.harness.kube import Json, list_pods, wait_for
from e2e.harness.testbed import SimCluster
from e2e.harness.webhook import CONFIG, RunningWebhook, ca_bundle, helm_binary, start_webhook
from e2e.kubelet_standin.errors import StandInError
from e2e.scenarios.probes import H100, MIXED, apply, attribute, container, results, running

pytestmark = [pytest.mark.e2e, pytest.mark.mixes_families]

ROOT = Path(__file__).resolve().parents[2]
EXAMPLES = ROOT / "admission" / "examples"
WEBHOOK_NS = "tessera-admission-e2e"
ENTRY = "tessera-gpu-0"


def example(name: str) -> Json:
    doc: Json = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


@pytest.fixture(scope="module")
def webhook(bed: SimCluster, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RunningWebhook]:
    if helm_binary() is None:
        pytest.skip("no helm: run deploy/helm/build-helm.sh")
    log = tmp_path_factory.mktemp("webhook") / "webhook.log"
    running = start_webhook(bed.api, bed.kubectl, bed.plane.kubeconfig, WEBHOOK_NS, log)
    try:
        yield running
    finally:
        running.stop()


def _capacity(result: Json) -> dict[str, str]:
    """consumedCapacity with memory in MiB (the API server writes `1Gi` for 1024Mi)."""
    out = {k: str(v) for k, v in (result.get("consumedCapacity") or {}).items()}
    if Cap.MEMORY in out:
        out[Cap.MEMORY] = f"{parse_quantity(out[Cap.MEMORY]).value / (1 << 20)}Mi"
    return out


def _converted(pod: Json) -> Json:
    record: Json = yaml.safe_load(pod["metadata"]["annotations"][names.CONVERTED_ANNOTATION])
    return record


def test_the_certificate_is_the_webhooks_own_and_trusted(bed: SimCluster, webhook: RunningWebhook) -> None:
    secret = k8s.CoreV1Api(bed.api).read_namespaced_secret(f"{CONFIG}-tls", WEBHOOK_NS)
    assert secret.data is not None
    assert base64.b64decode(ca_bundle(bed.api)).startswith(base64.b64decode(secret.data["ca.crt"]))


def test_default_use_two_slices_on_distinct_gpus_with_their_limits(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    apply(bed, ns, [example("hami-default-use.yaml")])
    pod = running(bed, ns, "gpu-pod")
    assert "nvidia.com/gpu" not in yaml.safe_dump(pod["spec"]["containers"])
    assert _converted(pod)["containers"][0]["from"]["nvidia.com/gpumem"] == "3000"
    found = results(bed, ns, pod, ENTRY)
    assert len(found) == 2 and len({r["device"] for r in found}) == 2
    assert all(_capacity(r)[Cap.MEMORY] == "3000Mi" and _capacity(r)[Cap.CORES] == "30" for r in found)
    env = container(bed, ns, pod, "ubuntu-container").env_map()
    assert env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}0"] == env[f"{HamiEnv.MEMORY_LIMIT_PREFIX}1"] == "3000m"
    assert env[f"{HamiEnv.SM_LIMIT_PREFIX}0"] == "30"


def test_memory_fraction_is_half_of_the_gpu_it_gets(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    apply(bed, ns, [example("hami-memory-fraction.yaml")])
    pod = running(bed, ns, "gpu-pod-fraction")
    for r in results(bed, ns, pod, ENTRY):
        product = find_product(str(attribute(bed, pod["spec"]["nodeName"], r["device"], Attr.PRODUCT_NAME)))
        assert product is not None
        assert (
            _capacity(r)[Cap.MEMORY] == f"{product.memory_mib * 50 // 100}Mi"
            and _capacity(r)[Cap.CORES] == "30"
        )


def test_card_type_lands_on_the_a100s(bed: SimCluster, ns: str, webhook: RunningWebhook) -> None:
    apply(bed, ns, [example("hami-card-type.yaml")])
    pod = running(bed, ns, "gpu-pod-type")
    assert pod["spec"]["nodeName"] == MIXED
    products = {attribute(bed, MIXED, r["device"], Attr.PRODUCT_NAME) for r in results(bed, ns, pod, ENTRY)}
    assert products == {"NVIDIA A100-SXM4-40GB"}


def test_uuid_exclusion_and_exclusive_cards(bed: SimCluster, ns: str, webhook: RunningWebhook) -> None:
    apply(bed, ns, [example("hami-uuid-exclusion.yaml"), example("hami-exclusive-card.yaml")])
    pod = running(bed, ns, "gpu-pod-nouuid")
    assert all(attribute(bed, pod["spec"]["nodeName"], r["device"], Attr.UUID) != "GPU-123456"
               for r in results(bed, ns, pod, ENTRY))  # fmt: skip
    exclusive = running(bed, ns, "gpu-pod-exclusive")
    devices = [r["device"] for r in results(bed, ns, exclusive, ENTRY)]
    node = exclusive["spec"]["nodeName"]
    assert len(set(devices)) == 2 and all(attribute(bed, node, d, Attr.TYPE) == "gpu" for d in devices)


def test_dynamic_mig_gets_the_smallest_profile_that_holds_it(
    bed: SimCluster, ns: str, webhook: RunningWebhook
) -> None:
    apply(bed, ns, [example("hami-dynamic-mig.yaml")])
    pod = running(bed, ns, "gpu-pod-mig", timeout_s=90)
    found = results(bed, ns, pod, ENTRY)
    assert pod["spec"]["nodeName"] == H100 and len(found) == 2
    assert {attribute(bed, H100, r["device"], Attr.PROFILE) for r in found} == {"1g.10gb"}
    assert len({attribute(bed, H100, r["device"], Attr.PARENT_UUID) for r in found}) == 2


def test_a_deployments_pods_and_volcanos_example(bed: SimCluster, ns: str, webhook: RunningWebhook) -> None:
    # The Pod is made from the template as the ReplicaSet controller makes it (generateName, no name), through
    # the same admission, so the test does not wait on a rollout.
    template = copy.deepcopy(example("hami-deployment.yaml")["spec"]["template"])
    replica = {"apiVersion": "v1", "kind": "Pod", **template}
    replica["metadata"] = {**template["metadata"], "generateName": "inference-"}
    bed.kubectl.run("create", f"--namespace={ns}", "-f", "-", stdin=yaml.safe_dump(replica))
    apply(bed, ns, [example("volcano-vgpu.yaml")])
    volcano = running(bed, ns, "test1")
    assert "schedulerName" not in volcano["spec"] or volcano["spec"]["schedulerName"] == "default-scheduler"
    (r,) = results(bed, ns, volcano, ENTRY)
    assert _capacity(r)[Cap.MEMORY] == "1024Mi"

    def replicas() -> list[str]:
        return [
            p["metadata"]["name"]
            for p in list_pods(bed.api, ns)
            if p["metadata"]["name"].startswith("inference-")
        ]

    name = wait_for("the replica", replicas)[0]
    (r,) = results(bed, ns, running(bed, ns, name), ENTRY)
    assert _capacity(r)[Cap.MEMORY] == "4000Mi" and _capacity(r)[Cap.CORES] == "25"


@pytest.mark.parametrize(
    ("limits", "annotations", "message"),
    [
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpumem": 900000},
            {},
            "limits[nvidia.com/gpumem]: 900000 MiB is more",
        ),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 120},
            {},
            "limits[nvidia.com/gpucores]: 120 is over 100",
        ),
        ({"nvidia.com/gpumem": 1000, "nvidia.com/gpumem-percentage": 50}, {}, "not both"),
        (
            {"nvidia.com/gpu": 1, "nvidia.com/gpucores": 20},
            {"nvidia.com/vgpu-mode": "mig"},
            "gpucores]: a MIG",
        ),
        ({"nvidia.com/gpu": 0}, {}, "limits[nvidia.com/gpu]: 0 asks for no GPU"),
    ],
    ids=["too-much-memory", "cores-over-100", "memory-twice", "mig-with-cores", "zero"],
)
def test_invalid_requests_are_refused_naming_the_field(
    bed: SimCluster,
    ns: str,
    webhook: RunningWebhook,
    limits: dict[str, Any],
    annotations: dict[str, str],
    message: str,
) -> None:
    pod = example("hami-default-use.yaml")
    pod["metadata"]["annotations"] = annotations
    pod["spec"]["containers"][0]["resources"]["limits"] = limits
    with pytest.raises(StandInError) as refused:
        apply(bed, ns, [pod])
    text = str(refused.value)
    assert "denied the request" in text and "spec.containers[0].resources" in text and message in text


def test_an_outage_refuses_gpu_pods_only(bed: SimCluster, ns: str, webhook: RunningWebhook) -> None:
    """failurePolicy Fail with matchConditions: no replica answering refuses a GPU Pod (its controller would
    retry) and lets every other Pod through. Runs last: it stops the module's webhook."""
    webhook.process.kill()
    webhook.process.wait(timeout=15)
    plain = example("hami-default-use.yaml")
    plain["metadata"]["name"] = "no-gpu"
    plain["spec"]["containers"][0]["resources"] = {"limits": {"cpu": "100m"}}
    apply(bed, ns, [plain])
    with pytest.raises(StandInError, match="failed calling webhook"):
        apply(bed, ns, [example("hami-default-use.yaml")])
