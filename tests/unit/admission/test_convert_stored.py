"""A template found in the cluster is the conversion's only with its label and its content, as the API server
stores it; a squatter's is named for what is wrong; GitOps templates are never the webhook's to delete."""

import copy
import time
from typing import Any

import pytest

from admission.convert import names
from admission.convert.pod import Template
from admission.convert.stored import difference, dropped, made_by_webhook, refusal, same_content

EXACTLY = ("spec", "spec", "devices", "requests", 0, "exactly")
SPEC: dict[str, Any] = {
    "spec": {
        "devices": {
            "requests": [
                {
                    "name": "gpu",
                    "exactly": {
                        "deviceClassName": "vgpu.tessera.dev",
                        "allocationMode": "ExactCount",
                        "count": 2,
                        "capacity": {"requests": {"memory": "1024Mi", "cores": "30"}},
                    },
                }
            ]
        }
    }
}
OURS = Template("tessera-hami-0123456789abcdef", SPEC, "c", "summary")


def as_stored(template: Template, *, made_by_webhook: bool = True) -> dict[str, Any]:
    stored = template.manifest("ns", made_by_webhook=made_by_webhook)
    stored["spec"]["metadata"] = {"creationTimestamp": None}
    stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]["requests"]["memory"] = "1Gi"
    return stored


def test_the_stored_form_of_our_template_is_ours() -> None:
    assert difference(as_stored(OURS), OURS) is None
    assert difference(as_stored(OURS, made_by_webhook=False), OURS) is None  # `tessera convert`'s


@pytest.mark.parametrize(
    ("path", "value", "said"),
    [
        (("spec", "spec", "devices", "requests", 0, "exactly", "count"), 1, "its spec"),
        (
            ("spec", "spec", "devices", "requests", 0, "exactly", "capacity", "requests", "memory"),
            "2Gi",
            "spec",
        ),
        (("spec", "spec", "devices", "requests", 0, "exactly", "adminAccess"), True, "its spec"),
        (("spec", "spec", "devices", "config"), [{"requests": ["gpu"]}], "its spec"),
        (("spec", "metadata", "labels"), {"x": "y"}, "its spec"),
        (("metadata", "labels"), {"app": "mine"}, "lacks the label"),
    ],
)
def test_anything_else_is_named(path: tuple[Any, ...], value: object, said: str) -> None:
    squatter = as_stored(OURS)
    holder: Any = squatter
    for step in path[:-1]:
        holder = holder[step]
    holder[path[-1]] = value
    problem = difference(squatter, OURS)
    assert problem is not None and said in problem


def test_a_field_missing_or_a_list_of_another_length_differs() -> None:
    stored = as_stored(OURS)
    del stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"]
    assert not same_content(stored["spec"], OURS.spec)
    two = copy.deepcopy(as_stored(OURS)["spec"])
    two["spec"]["devices"]["requests"].append(two["spec"]["devices"]["requests"][0])
    assert not same_content(two, OURS.spec)


def test_quantities_compare_by_value_and_huge_exponents_are_not_computed() -> None:
    assert same_content("1Gi", "1024Mi") and same_content("30", "30") and not same_content("1G", "1Gi")
    assert not same_content("gpu", "gpu.tessera.dev") and not same_content(2, "2")
    started = time.monotonic()
    assert not same_content("1e99999999", "1")
    assert time.monotonic() - started < 0.5


def test_only_the_webhooks_own_label_makes_a_template_deletable() -> None:
    assert made_by_webhook(as_stored(OURS))
    assert not made_by_webhook(as_stored(OURS, made_by_webhook=False))  # GitOps: never deleted
    mislabelled = as_stored(OURS)
    mislabelled["metadata"]["labels"] = {names.MADE_BY[0]: names.MADE_BY[1]}  # no managed-by: not ours
    assert not made_by_webhook(mislabelled)


def test_fields_dropped_by_the_api_server_are_named_with_the_gates_not_taken_for_a_squatter() -> None:
    """On 1.35 with DRAConsumableCapacity off the API server stores the webhook's own template without its
    capacity requests: that is not ours to use, and not a squatter either."""
    stored = as_stored(OURS)
    del stored["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
    problem = difference(stored, OURS)
    assert (
        problem is not None and "stored it without spec.spec.devices.requests[0].exactly.capacity" in problem
    )
    assert "Turn the gates on" in refusal("ns", OURS, problem)
    other = as_stored(OURS)
    del other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["capacity"]
    other["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1  # dropped and changed: a squatter
    squatted = difference(other, OURS)
    assert squatted is not None and "its spec is not" in squatted
    assert "Delete or rename" in refusal("ns", OURS, squatted)
    assert dropped({"a": {"b": 1}}, {"a": {"b": 1, "c": 2}, "d": [1]}) == ["spec.a.c", "spec.d"]
    assert dropped({"a": 1}, {"a": 2}) == []
