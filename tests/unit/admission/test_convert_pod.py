"""Whole pods and workloads: HAMi's and Volcano's documented examples, as users apply them."""

import json
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.convert import names
from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.convert.pod import convert_object, convert_pod_parts
from dra_driver.vocabulary.errors import ConversionError

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples"
OPTIONS = Options(known_products(), replace_schedulers=("volcano",))


def load(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((EXAMPLES / name).read_text())
    return doc


def requests_of(template: dict[str, Any]) -> Any:
    return template["spec"]["spec"]["devices"]["requests"][0]


@pytest.mark.parametrize(
    ("name", "class_name", "capacity"),
    [
        ("hami-default-use.yaml", "vgpu.tessera.dev", {"memory": "3000Mi", "cores": "30"}),
        ("hami-exclusive-card.yaml", "gpu.tessera.dev", None),
        ("hami-card-type.yaml", "vgpu.tessera.dev", None),
        ("hami-uuid-exclusion.yaml", "vgpu.tessera.dev", None),
        ("volcano-vgpu.yaml", "vgpu.tessera.dev", {"memory": "1024Mi"}),
    ],
)
def test_examples_become_one_claim_per_container(name: str, class_name: str, capacity: Any) -> None:
    result = convert_object(load(name), OPTIONS)
    manifests = result.manifests()
    template, pod = manifests[0], manifests[-1]
    assert template["kind"] == "ResourceClaimTemplate"
    exactly = requests_of(template)["exactly"]
    assert exactly["deviceClassName"] == class_name
    assert exactly.get("capacity", {}).get("requests") == capacity
    container = pod["spec"]["containers"][0]
    assert container["resources"] == {"claims": [{"name": "tessera-gpu-0"}]}
    assert pod["spec"]["resourceClaims"] == [
        {"name": "tessera-gpu-0", "resourceClaimTemplateName": template["metadata"]["name"]}
    ]
    record = json.loads(pod["metadata"]["annotations"][names.CONVERTED_ANNOTATION])
    assert record["containers"][0]["template"] == template["metadata"]["name"]
    assert "schedulerName" not in pod["spec"]


def test_dynamic_mig_example_takes_a_10gb_profile_and_notes_the_policy() -> None:
    result = convert_object(load("hami-dynamic-mig.yaml"), OPTIONS)
    alternatives = requests_of(result.manifests()[0])["firstAvailable"]
    assert alternatives[0]["name"] == "1g-10gb" and alternatives[0]["count"] == 2
    assert any("gpu-scheduler-policy: binpack not honoured" in n for n in result.pod.notes)


def test_deployment_pod_template_is_converted() -> None:
    result = convert_object(load("hami-deployment.yaml"), OPTIONS)
    template = result.obj["spec"]["template"]
    assert template["spec"]["resourceClaims"][0]["resourceClaimTemplateName"].startswith("tessera-hami-")
    assert names.CONVERTED_ANNOTATION in template["metadata"]["annotations"]
    assert template["metadata"]["labels"] == {"app": "inference"}


def test_init_containers_and_containers_each_get_a_claim_and_other_resources_stay() -> None:
    spec: dict[str, Any] = {
        "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 1, "cpu": "1"}}}],
        "containers": [
            {
                "name": "a",
                "resources": {"limits": {"nvidia.com/gpumem": 1000}, "requests": {"nvidia.com/gpumem": 1000}},
            },
            {"name": "b", "resources": {"limits": {"memory": "1Gi"}}},
        ],
    }
    result = convert_pod_parts({}, spec, OPTIONS)
    assert [c["name"] for c in result.spec["resourceClaims"]] == ["tessera-gpu-init-0", "tessera-gpu-0"]
    assert result.spec["initContainers"][0]["resources"] == {
        "limits": {"cpu": "1"},
        "claims": [{"name": "tessera-gpu-init-0"}],
    }
    assert result.spec["containers"][0]["resources"] == {"claims": [{"name": "tessera-gpu-0"}]}
    assert result.spec["containers"][1] == spec["containers"][1]
    assert spec["containers"][0]["resources"]["limits"] == {"nvidia.com/gpumem": 1000}  # input untouched


def test_converting_twice_changes_nothing_more() -> None:
    first = convert_object(load("hami-default-use.yaml"), OPTIONS)
    second = convert_object(first.obj, OPTIONS)
    assert not second.pod.changed and second.obj == first.obj


def test_same_request_same_template_name() -> None:
    a = convert_object(load("hami-default-use.yaml"), OPTIONS).pod.templates[0].name
    b = convert_object(load("hami-default-use.yaml"), OPTIONS).pod.templates[0].name
    assert a == b


def test_errors_name_the_workload_and_the_path() -> None:
    doc = load("hami-deployment.yaml")
    doc["spec"]["template"]["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = 150
    with pytest.raises(ConversionError, match=r"^Deployment/inference: spec.template.spec.containers\[0\]"):
        convert_object(doc, OPTIONS)


def test_other_kinds_pass_through() -> None:
    service = {"apiVersion": "v1", "kind": "Service", "metadata": {"name": "s"}}
    assert convert_object(service, OPTIONS).manifests() == [service]
