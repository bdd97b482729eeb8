"""A converted Pod's templates, derived again from what the Pod carries: exactly the admission's for a real
Pod, nothing for a forged record or a changed catalog (with the reason), never an exception."""

import copy
import json
from pathlib import Path
from typing import Any

import pytest
import yaml
from hypothesis import given, settings
from hypothesis import strategies as st

from admission.convert import names
from admission.convert.catalog import Catalog, known_products
from admission.convert.claims import Options
from admission.convert.pod import MAX_GPU_CONTAINERS, convert_pod_parts
from admission.convert.promises import rederive

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples"
OPTIONS = Options(known_products(), replace_schedulers=("volcano",))
POD_EXAMPLES = sorted(
    p.name for p in EXAMPLES.glob("*.yaml") if yaml.safe_load(p.read_text())["kind"] == "Pod"
)


def admitted(name: str, options: Options = OPTIONS) -> tuple[dict[str, Any], dict[str, Any], Any]:
    """The example Pod as the API server stores it after the webhook's patch, and the conversion."""
    pod = yaml.safe_load((EXAMPLES / name).read_text())
    result = convert_pod_parts(pod["metadata"], pod["spec"], options)
    return result.metadata, result.spec, result


def record_of(metadata: dict[str, Any]) -> dict[str, Any]:
    loaded: dict[str, Any] = json.loads(metadata["annotations"][names.CONVERTED_ANNOTATION])
    return loaded


def with_record(metadata: dict[str, Any], record: object) -> dict[str, Any]:
    out = copy.deepcopy(metadata)
    out["annotations"][names.CONVERTED_ANNOTATION] = record if isinstance(record, str) else json.dumps(record)
    return out


@pytest.mark.parametrize("name", POD_EXAMPLES)
def test_a_real_pod_is_promised_exactly_its_admissions_templates(name: str) -> None:
    metadata, spec, result = admitted(name)
    promised = rederive(metadata, spec, OPTIONS)
    assert promised.messages == ()
    assert [t for _, t in promised.templates] == list(result.templates)
    assert {t for _, t in promised.references} == {t.name for t in result.templates}


def test_init_containers_and_env_config_are_derived_again() -> None:
    pod: dict[str, Any] = {
        "metadata": {"annotations": {"nvidia.com/use-gputype": "A100"}},
        "spec": {
            "initContainers": [{"name": "warm", "resources": {"limits": {"nvidia.com/gpu": 1}}}],
            "containers": [
                {
                    "name": "main",
                    "env": [{"name": names.SM_POLICY_ENV, "value": "force"}],
                    "resources": {"limits": {"nvidia.com/gpumem": 2000, "nvidia.com/gpucores": 20}},
                }
            ],
        },
    }
    result = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS)
    promised = rederive(result.metadata, result.spec, OPTIONS)
    assert [t for _, t in promised.templates] == list(result.templates) and len(result.templates) == 2
    # without the env the content (its VgpuConfig) differs: the env is read from the pod, not trusted away
    spec = copy.deepcopy(result.spec)
    spec["containers"][0]["env"] = []
    assert rederive(result.metadata, spec, OPTIONS).templates[:1] == promised.templates[:1]
    assert len(rederive(result.metadata, spec, OPTIONS).templates) == 1


def test_a_forged_record_promises_nothing_and_says_why() -> None:
    metadata, spec, _result = admitted("hami-default-use.yaml")
    record = record_of(metadata)
    record["containers"][0]["from"]["nvidia.com/gpumem"] = "60000"  # a bigger ask than the pod was admitted
    promised = rederive(with_record(metadata, record), spec, OPTIONS)
    assert promised.templates == ()
    (problem,) = promised.messages
    claim, template = promised.references[0]
    assert problem.startswith(f"spec.resourceClaims[{claim}]: references ResourceClaimTemplate {template}")
    assert "delete the pod" in problem
    # the pod still references its template: the sweep keeps it
    assert promised.references == tuple(
        (c["name"], c["resourceClaimTemplateName"]) for c in spec["resourceClaims"]
    )


def test_a_catalog_changed_since_admission_promises_nothing() -> None:
    metadata, spec, _ = admitted("hami-memory-fraction.yaml")
    fewer = Options(Catalog(known_products().products[:1]), replace_schedulers=("volcano",))
    promised = rederive(metadata, spec, fewer)
    assert promised.templates == () and "GPU products offered that changed" in promised.messages[0]


@pytest.mark.parametrize(
    ("record", "said"),
    [
        (None, "missing"),
        ("{not json", "not the record"),
        ("x" * 70_000, "70000 characters"),
        ({"containers": "all"}, "not the record"),
        ({"containers": [1]}, "not a map"),
        ({"containers": [{"container": "ghost", "claim": "c", "from": {"nvidia.com/gpu": "1"}}]}, "ghost"),
        ({"containers": [{"container": "ubuntu-container", "claim": "c", "from": {"cpu": "1"}}]}, "no HAMi"),
        ({"containers": [{"container": "ubuntu-container", "claim": "c", "from": {"nvidia.com/gpu": "x"}}]},
         "not a whole number"),
        ({"containers": [{}] * (MAX_GPU_CONTAINERS + 1)}, "more than the conversion writes"),
        ({"containers": [], "annotations": {"nvidia.com/vgpu-mode": "fast"}}, "not a mode"),
    ],
    ids=["missing", "not-json", "huge", "not-a-list", "not-a-map", "no-such-container", "no-gpu", "bad-value",
         "too-many", "bad-annotation"],
)  # fmt: skip
def test_a_record_the_conversion_did_not_write_promises_nothing(record: object, said: str) -> None:
    metadata, spec, _ = admitted("hami-default-use.yaml")
    metadata = {**metadata, "annotations": {}} if record is None else with_record(metadata, record)
    promised = rederive(metadata, spec, OPTIONS)
    assert promised.templates == () and len(promised.messages) == 1 and said in promised.messages[0]


_json = st.recursive(
    st.none() | st.booleans() | st.integers() | st.text(max_size=20),
    lambda inner: st.lists(inner, max_size=4) | st.dictionaries(st.text(max_size=10), inner, max_size=4),
    max_leaves=20,
)
_entry = st.fixed_dictionaries(
    {},
    optional={
        "container": st.sampled_from(["ubuntu-container", "other"]) | _json,
        "claim": st.sampled_from(["tessera-gpu-0"]) | _json,
        "from": st.dictionaries(st.sampled_from(names.all_resource_names()), st.text(max_size=6) | _json)
        | _json,
    },
)


@settings(max_examples=300, deadline=None)
@given(
    record=st.fixed_dictionaries(
        {"containers": st.lists(_entry, max_size=3)}, optional={"annotations": _json}
    )
)
def test_any_record_gives_templates_of_the_referenced_names_or_problems_never_an_exception(
    record: Any,
) -> None:
    metadata, spec, _ = admitted("hami-default-use.yaml")
    promised = rederive(with_record(metadata, record), spec, OPTIONS)
    referenced = dict(promised.references)
    assert all(referenced.get(claim) == t.name for claim, t in promised.templates)
