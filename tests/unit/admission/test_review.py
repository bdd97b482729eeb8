"""AdmissionReviews in, answers out: the patch makes the converted Pod; refusals name the field."""

import base64
import copy
import json
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission.convert import names
from admission.convert.catalog import known_products
from admission.convert.claims import Options
from admission.convert.pod import Template, convert_pod_parts
from admission.review import admit, match_expression
from dra_driver.values.errors import TesseraError

REPO = Path(__file__).resolve().parents[3]
OPTIONS = Options(known_products(), replace_schedulers=("volcano",))


def apply_patch(doc: dict[str, Any], ops: list[dict[str, Any]]) -> dict[str, Any]:
    out = copy.deepcopy(doc)
    for op in ops:
        *parents, last = [p.replace("~1", "/").replace("~0", "~") for p in op["path"].split("/")[1:]]
        target = out
        for p in parents:
            target = target[p]
        if op["op"] == "remove":
            del target[last]
        else:
            assert op["op"] in ("add", "replace") and (op["op"] == "add") == (last not in target)
            target[last] = op["value"]
    return out


def review(pod: dict[str, Any], *, operation: str = "CREATE", dry_run: bool = False) -> dict[str, Any]:
    return {
        "apiVersion": "admission.k8s.io/v1",
        "kind": "AdmissionReview",
        "request": {
            "uid": "u-1",
            "kind": {"group": "", "version": "v1", "kind": "Pod"},
            "operation": operation,
            "namespace": "team-a",
            "dryRun": dry_run,
            "object": pod,
        },
    }


class Recorder:
    def __init__(self, fail: bool = False) -> None:
        self.calls: list[tuple[str, list[str], bool]] = []
        self.fail = fail

    def __call__(self, namespace: str, templates: Sequence[Template], dry_run: bool) -> None:
        if self.fail:
            raise TesseraError("the API server is away")
        self.calls.append((namespace, [t.name for t in templates], dry_run))


def example(name: str) -> dict[str, Any]:
    doc: dict[str, Any] = yaml.safe_load((REPO / "admission" / "examples" / name).read_text())
    return doc


@pytest.mark.parametrize("name", ["hami-default-use.yaml", "volcano-vgpu.yaml", "hami-dynamic-mig.yaml"])
def test_the_patch_makes_the_converted_pod_and_templates_are_made_first(name: str) -> None:
    pod, ensure = example(name), Recorder()
    answer = admit(review(pod), OPTIONS, ensure)["response"]
    assert answer["uid"] == "u-1" and answer["allowed"] and answer["patchType"] == "JSONPatch"
    patched = apply_patch(pod, json.loads(base64.b64decode(answer["patch"])))
    expected = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS)
    assert patched["spec"] == expected.spec and patched["metadata"] == expected.metadata
    assert ensure.calls == [("team-a", [t.name for t in expected.templates], False)]


def test_notes_are_warnings() -> None:
    answer = admit(review(example("hami-dynamic-mig.yaml")), OPTIONS, Recorder())["response"]
    assert any(names.GPU_SCHEDULER_POLICY in w for w in answer["warnings"])


def test_dry_run_is_passed_on() -> None:
    ensure = Recorder()
    admit(review(example("hami-default-use.yaml"), dry_run=True), OPTIONS, ensure)
    assert ensure.calls[0][2] is True


def test_refusal_names_the_field() -> None:
    pod = example("hami-default-use.yaml")
    pod["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpucores"] = 101
    answer = admit(review(pod), OPTIONS, Recorder())["response"]
    assert not answer["allowed"] and answer["status"]["code"] == 400
    assert answer["status"]["message"].startswith(
        "spec.containers[0].resources.limits[nvidia.com/gpucores]: 101"
    )


def test_template_failure_is_a_denial_not_a_pod_without_claims() -> None:
    answer = admit(review(example("hami-default-use.yaml")), OPTIONS, Recorder(fail=True))["response"]
    assert not answer["allowed"] and "the API server is away" in answer["status"]["message"]


def test_other_requests_and_plain_pods_pass_unchanged() -> None:
    plain = {"metadata": {"name": "p"}, "spec": {"containers": [{"name": "c"}]}}
    for r in (review(plain), review(example("hami-default-use.yaml"), operation="UPDATE")):
        assert admit(r, OPTIONS, Recorder())["response"] == {"uid": "u-1", "allowed": True}


def test_the_charts_match_condition_is_the_generated_one() -> None:
    chart = (REPO / "deploy" / "helm" / "tessera" / "templates" / "admission-webhook.yaml").read_text()
    assert match_expression(names.all_resource_names()) in chart
