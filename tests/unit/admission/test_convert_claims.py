"""Container requests → claim specs: families, capacities, distinct GPUs, selectors, MIG, refusals."""

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.convert import names
from admission.convert.catalog import Catalog, MigOption, Product, from_slices, known_products
from admission.convert.claims import Options, convert_ask
from admission.convert.parse import GpuAsk, Selection
from admission.convert.pod import convert_object
from dra_driver.explain.cel_env import Outcome, compile_selector, device_variable
from dra_driver.vocabulary.errors import ConversionError

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples"

H100 = Product(
    "NVIDIA H100 80GB HBM3",
    81559,
    (MigOption(9856, 1, "1g.10gb"), MigOption(20096, 1, "1g.20gb"), MigOption(40192, 3, "3g.40gb")),
)
L4 = Product("NVIDIA L4", 23034)
OPTIONS = Options(Catalog((H100, L4)))
NONE = Selection()


def ask(**kw: Any) -> GpuAsk:
    base: dict[str, Any] = {"path": "spec.containers[0]", "container": "c", "dialect": names.HAMI, "count": 1}
    return GpuAsk(**{**base, **kw})


def devices(a: GpuAsk, selection: Selection = NONE, options: Options = OPTIONS) -> dict[str, Any]:
    spec: Any = convert_ask(a, selection, options).spec
    return dict(spec["spec"]["devices"])


def test_memory_and_cores_are_capacity_of_a_vgpu_request_on_distinct_gpus() -> None:
    d = devices(ask(count=2, memory_mib=3000, cores=30))
    exactly = d["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "vgpu.tessera.dev" and exactly["count"] == 2
    assert exactly["capacity"] == {"requests": {"memory": "3000Mi", "cores": "30"}}
    assert d["constraints"] == [{"requests": ["gpu"], "distinctAttribute": "gpu.tessera.dev/uuid"}]


def test_no_memory_no_cores_is_a_full_size_slice_without_sm_limit() -> None:
    d = devices(ask())
    assert d["requests"][0]["exactly"]["deviceClassName"] == "vgpu.tessera.dev"
    assert "capacity" not in d["requests"][0]["exactly"] and "constraints" not in d


@pytest.mark.parametrize("percent", [100, None])
def test_all_memory_and_all_cores_is_a_whole_gpu(percent: int | None) -> None:
    converted = convert_ask(ask(count=2, memory_percent=percent, cores=100), Selection(), OPTIONS)
    assert converted.family == "gpu"
    spec: Any = converted.spec
    d = spec["spec"]["devices"]
    assert d["requests"][0]["exactly"]["deviceClassName"] == "gpu.tessera.dev"
    assert "whole GPUs on distinct GPUs" in converted.summary


def test_memory_percentage_is_one_alternative_per_product() -> None:
    d = devices(ask(memory_percent=50, cores=10))
    alternatives = d["requests"][0]["firstAvailable"]
    assert [a["capacity"]["requests"]["memory"] for a in alternatives] == ["40779Mi", "11517Mi"]
    assert [a["name"] for a in alternatives] == ["nvidia-h100-80gb-hbm3", "nvidia-l4"]
    assert 'productName == "NVIDIA L4"' in alternatives[1]["selectors"][0]["cel"]["expression"]
    assert all(a["capacity"]["requests"]["cores"] == "10" for a in alternatives)


def test_mig_mode_takes_the_smallest_profile_that_holds_the_memory() -> None:
    sel = Selection(modes=(("hami", "mig"),))
    d = devices(ask(count=2, memory_mib=12000), sel)
    exactly = d["requests"][0]["exactly"]
    assert exactly["deviceClassName"] == "mig.tessera.dev"
    assert 'profile == "1g.20gb"' in exactly["selectors"][0]["cel"]["expression"]
    assert d["constraints"][0]["distinctAttribute"] == "gpu.tessera.dev/parentUUID"


def test_mig_alternatives_have_distinct_names_over_all_known_products() -> None:
    sel = Selection(modes=(("hami", "mig"),))
    d = devices(ask(memory_mib=8000), sel, Options(known_products()))
    names_ = [a["name"] for a in d["requests"][0]["firstAvailable"]]
    assert len(names_) == len(set(names_)) and names_[0] == "1g-10gb"


def test_mps_mode_uses_the_mps_class() -> None:
    d = devices(ask(memory_mib=1000, cores=20), Selection(modes=(("hami", "mps"),)))
    assert d["requests"][0]["exactly"]["deviceClassName"] == "mps.tessera.dev"


def test_selectors_for_types_and_uuids() -> None:
    sel = Selection(
        use_types=("a100", "H100"), nouse_types=("T4",), use_uuids=("GPU-1",), nouse_uuids=("GPU-2",)
    )
    exprs = [s["cel"]["expression"] for s in devices(ask(), sel)["requests"][0]["exactly"]["selectors"]]
    assert (
        exprs[0] == '["A100", "H100"].exists(t, device.attributes["gpu.tessera.dev"].productName.upperAscii()'
        ".contains(t))"
    )
    assert exprs[1].startswith("![") and '"T4"' in exprs[1]
    assert exprs[2] == 'device.attributes["gpu.tessera.dev"].uuid in ["GPU-1"]'
    assert exprs[3] == '!(device.attributes["gpu.tessera.dev"].uuid in ["GPU-2"])'


def test_env_config_becomes_an_opaque_vgpu_config() -> None:
    spec: Any = convert_ask(ask(), Selection(), OPTIONS, {"smLimitPolicy": "force"}).spec
    config = spec["spec"]["devices"]["config"][0]
    assert config["opaque"]["driver"] == "gpu.tessera.dev"
    assert config["opaque"]["parameters"] == {
        "apiVersion": "resource.tessera.dev/v1",
        "kind": "VgpuConfig",
        "smLimitPolicy": "force",
    }


def test_high_priority_needs_the_administrators_class() -> None:
    with pytest.raises(ConversionError, match=r"limits\[nvidia.com/priority\]: 0 .*--high-priority-class"):
        convert_ask(ask(priority=0), Selection(), OPTIONS)
    d = devices(
        ask(priority=0), Selection(), Options(OPTIONS.catalog, high_priority_class="vgpu-high.example")
    )
    assert d["requests"][0]["exactly"]["deviceClassName"] == "vgpu-high.example"


@pytest.mark.parametrize(
    ("a", "selection", "message"),
    [
        (
            ask(memory_mib=90000),
            Selection(),
            r"limits\[nvidia.com/gpumem\]: 90000 MiB is more than .*81559 MiB",
        ),
        (ask(memory_mib=1000, cores=10), Selection(modes=(("hami", "mig"),)), r"gpucores\]: a MIG instance"),
        (ask(memory_mib=50000), Selection(modes=(("hami", "mig"),)), r"no MIG profile holds 50000 MiB"),
    ],
)
def test_refusals_name_the_field(a: GpuAsk, selection: Selection, message: str) -> None:
    with pytest.raises(ConversionError, match=message):
        convert_ask(a, selection, OPTIONS)


# ---- catalog values from any node: escaped, never part of the expression (issue #34) ----------------------

INJECTION = 'AAA" || "a" == "a'
DNS_LABEL = re.compile(r"[a-z0-9]([-a-z0-9]{0,61}[a-z0-9])?")


def hostile_catalog() -> Catalog:
    def published(product: str, kind: str, memory: str, profile: str | None = None) -> dict[str, Any]:
        attributes = {
            "gpu.tessera.dev/type": {"string": kind},
            "gpu.tessera.dev/productName": {"string": product},
        }
        if profile:
            attributes["gpu.tessera.dev/profile"] = {"string": profile}
        return {"name": "d", "attributes": attributes, "capacity": {"memory": {"value": memory}}}

    return from_slices(
        [
            {
                "metadata": {"name": "evil"},
                "spec": {
                    "driver": "gpu.tessera.dev",
                    "devices": [
                        published(INJECTION, "vgpu", "2Mi"),
                        published('"', "vgpu", "80Gi"),
                        published("NVIDIA-L4", "vgpu", "1Gi"),
                        published(INJECTION, "mig", "9856Mi", "1g.10gb"),
                        published("NVIDIA A30", "mig", "5952Mi", '1g.6gb" || "a" == "a'),
                    ],
                },
            },
            {
                "metadata": {"name": "good"},
                "spec": {
                    "driver": "gpu.tessera.dev",
                    "devices": [
                        published("NVIDIA L4", "vgpu", "23034Mi"),
                        published(H100.name, "mig", "9856Mi", "1g.10gb"),
                    ],
                },
            },
        ]
    )


def published_device(product: str, kind: str, profile: str | None = None) -> Any:
    attributes: dict[str, Any] = {
        "type": kind,
        "productName": product,
        "uuid": "GPU-1",
        "parentUUID": "GPU-1",
    }
    if profile:
        attributes["profile"] = profile
    return device_variable(
        driver="gpu.tessera.dev",
        attributes=attributes,
        capacity={},
        allow_multiple_allocations=kind == "vgpu",
    )


def matching(request: dict[str, Any], device: Any) -> list[dict[str, Any]]:
    """The alternatives of a request whose selectors all match `device`; each selector must compile under the
    API server's rules (syntax, names, cost) and evaluate to a bool."""
    out = []
    for alternative in request.get("firstAvailable") or [request["exactly"]]:
        outcomes = [
            compile_selector(s["cel"]["expression"]).evaluate(device).outcome
            for s in alternative["selectors"]
        ]
        assert set(outcomes) <= {Outcome.MATCH, Outcome.NO_MATCH}
        if all(o is Outcome.MATCH for o in outcomes):
            out.append(alternative)
    return out


def test_a_memory_percentage_pod_never_matches_through_a_hostile_product_name() -> None:
    pod = yaml.safe_load((EXAMPLES / "hami-memory-fraction.yaml").read_text())
    [template] = convert_object(pod, Options(hostile_catalog())).pod.templates
    request = template.spec["spec"]["devices"]["requests"][0]
    [l4] = matching(request, published_device("NVIDIA L4", "vgpu"))
    assert l4["capacity"]["requests"]["memory"] == "11517Mi"  # the L4's own alternative: half its 23034 MiB
    names_ = [a["name"] for a in request["firstAvailable"]]
    assert len(set(names_)) == len(names_) == 5 and all(DNS_LABEL.fullmatch(n) for n in names_)


def test_a_mig_pod_never_matches_through_a_hostile_product_name_or_profile() -> None:
    request = devices(ask(memory_mib=5000), Selection(modes=(("hami", "mig"),)), Options(hostile_catalog()))[
        "requests"
    ][0]
    [h100] = matching(request, published_device(H100.name, "mig", "1g.10gb"))
    assert h100["selectors"][0]["cel"]["expression"].endswith('.profile == "1g.10gb"')
    assert matching(request, published_device("NVIDIA A30", "mig", "2g.12gb")) == []
    assert matching(request, published_device(INJECTION, "mig", "2g.12gb")) == []
