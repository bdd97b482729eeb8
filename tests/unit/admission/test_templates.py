"""The template reconciler: a live admitted Pod gets exactly the templates the conversion gives it again, a
forged or squatted one gets none (and an Event saying why), a deleted one is made again, and the webhook's
unused ones go after the grace period while GitOps ones stay. The API server here is a dict (the API edge
runs against a real one in e2e/scenarios/test_admission_templates.py)."""

import copy
import itertools
import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

import pytest
import yaml

from admission import metrics
from admission.convert import names
from admission.convert.catalog import Catalog, known_products
from admission.convert.claims import Options
from admission.convert.pod import Template, convert_pod_parts
from admission.convert.promises import rederive
from admission.kube import AlreadyExistsError, ApiError
from admission.templates import REASON_NOT_MADE, TemplateReconciler, keep_pod, live

EXAMPLES = Path(__file__).resolve().parents[3] / "admission" / "examples"
OPTIONS = Options(known_products(), replace_schedulers=("volcano",))
GRACE = 300.0


class Cluster:
    """The API server's templates and Events; `store` is what the reconciler's watch has seen of them
    (the same dict, unless a test makes it lag)."""

    def __init__(self) -> None:
        self.templates: dict[tuple[str, str], dict[str, Any]] = {}
        self.events: list[tuple[str, str, str, str]] = []
        self.creates = 0
        self.fail_next: list[tuple[str, int | None]] = []
        self.gate_off = False  # the API server drops capacity requests, as with DRAConsumableCapacity off
        self._uids = itertools.count(1)

    def put(self, namespace: str, manifest: dict[str, Any]) -> None:
        manifest = copy.deepcopy(manifest)
        manifest["metadata"] |= {"namespace": namespace, "uid": f"uid-{next(self._uids)}"}
        self.templates[(namespace, manifest["metadata"]["name"])] = manifest

    # ---- admission.templates.Calls -----------------------------------------------------------------

    def create_template(self, namespace: str, template: Template) -> dict[str, Any]:
        if self.fail_next:
            raise ApiError(*self.fail_next.pop())
        self.creates += 1
        if (namespace, template.name) in self.templates:
            raise AlreadyExistsError("exists")
        manifest = template.manifest(namespace, made_by_webhook=True)
        if self.gate_off:
            for request in manifest["spec"]["spec"]["devices"]["requests"]:
                request["exactly"].pop("capacity", None)
        self.put(namespace, manifest)
        return self.templates[(namespace, template.name)]

    def read_template(self, namespace: str, name: str) -> dict[str, Any] | None:
        return self.templates.get((namespace, name))

    def delete_template(self, namespace: str, name: str, uid: str) -> bool:
        found = self.templates.get((namespace, name))
        if found is None or found["metadata"]["uid"] != uid:
            return False
        del self.templates[(namespace, name)]
        return True

    def warn_pod(self, namespace: str, pod: str, uid: str, reason: str, message: str) -> None:
        self.events.append((f"{namespace}/{pod}", uid, reason, message))


class Store:
    def __init__(self, cluster: Cluster, *, lagging: bool = False) -> None:
        self.cluster, self.lagging = cluster, lagging

    def get(self, namespace: str, name: str) -> dict[str, Any] | None:
        return None if self.lagging else self.cluster.templates.get((namespace, name))

    def items(self) -> list[Mapping[str, Any]]:
        return [] if self.lagging else list(self.cluster.templates.values())


class Clock:
    def __init__(self) -> None:
        self.now = 1000.0

    def __call__(self) -> float:
        return self.now


def reconciler(cluster: Cluster, *, lagging: bool = False, clock: Clock | None = None) -> TemplateReconciler:
    r = TemplateReconciler(
        calls=cluster, store=Store(cluster, lagging=lagging), options=lambda: OPTIONS, grace_s=GRACE,
        clock=clock or Clock(),
    )  # fmt: skip
    r.ready.set()
    return r


def admitted(example: str, name: str = "p", namespace: str = "team-a", uid: str = "pod-1") -> dict[str, Any]:
    """The example as the API server stores it once the webhook's patch is applied."""
    pod = yaml.safe_load((EXAMPLES / example).read_text())
    result = convert_pod_parts(pod["metadata"], pod["spec"], OPTIONS)
    metadata = {**result.metadata, "name": name, "namespace": namespace, "uid": uid}
    metadata["labels"] = {names.CONVERTED_LABEL[0]: names.CONVERTED_LABEL[1]}
    return {"metadata": metadata, "spec": result.spec, "status": {"phase": "Pending"}}


def templates_of(pod: dict[str, Any]) -> list[Template]:
    return [t for _, t in rederive(pod["metadata"], pod["spec"], OPTIONS).templates]


def test_a_live_admitted_pod_gets_exactly_its_templates_labelled_as_the_webhooks() -> None:
    cluster = Cluster()
    pod = admitted("hami-exclusive-card.yaml")
    reconciler(cluster).on_pod("ADDED", pod)
    source = yaml.safe_load((EXAMPLES / "hami-exclusive-card.yaml").read_text())
    (template,) = convert_pod_parts(source["metadata"], source["spec"], OPTIONS).templates
    made = cluster.templates[("team-a", template.name)]
    assert made["spec"] == template.spec
    assert made["metadata"]["labels"] == dict([names.MANAGED_BY, names.MADE_BY])
    assert len(cluster.templates) == 1 and cluster.events == []


def test_nothing_is_made_before_both_watches_have_listed() -> None:
    cluster = Cluster()
    r = reconciler(cluster)
    r.ready.clear()
    r.on_pod("ADDED", admitted("hami-default-use.yaml"))
    r.resync()
    assert cluster.templates == {}
    r.ready.set()
    r.resync()
    assert len(cluster.templates) == 1


def test_pods_asking_the_same_share_one_template_and_a_second_event_creates_nothing() -> None:
    cluster = Cluster()
    r = reconciler(cluster)
    for i in range(10):
        r.on_pod(
            "ADDED", admitted("hami-default-use.yaml" if i % 2 else "volcano-vgpu.yaml", f"p{i}", uid=f"u{i}")
        )
    r.on_pod("MODIFIED", admitted("volcano-vgpu.yaml", "p0", uid="u0"))
    assert len(cluster.templates) == 2 and cluster.creates == 2  # as many as distinct asks


def test_a_forged_record_makes_nothing_and_warns_the_pod_once() -> None:
    cluster = Cluster()
    pod = admitted("hami-default-use.yaml")
    record = json.loads(pod["metadata"]["annotations"][names.CONVERTED_ANNOTATION])
    record["containers"][0]["from"]["nvidia.com/gpumem"] = "70000"
    pod["metadata"]["annotations"][names.CONVERTED_ANNOTATION] = json.dumps(record)
    r = reconciler(cluster)
    r.on_pod("ADDED", pod)
    r.on_pod("MODIFIED", pod)
    r.resync()
    assert cluster.templates == {}
    ((where, uid, reason, message),) = cluster.events
    assert (where, uid, reason) == ("team-a/p", "pod-1", REASON_NOT_MADE) and "references" in message


@pytest.mark.parametrize("lagging", [False, True], ids=["seen-by-the-watch", "met-as-a-409"])
def test_a_squatted_template_is_never_used_and_the_pod_is_told(lagging: bool) -> None:
    cluster = Cluster()
    pod = admitted("hami-default-use.yaml")
    (template,) = templates_of(pod)
    squatter = template.manifest("team-a")
    squatter["spec"]["spec"]["devices"]["requests"][0]["exactly"]["count"] = 1
    cluster.put("team-a", squatter)
    reconciler(cluster, lagging=lagging).on_pod("ADDED", pod)
    assert cluster.templates[("team-a", template.name)]["spec"] == squatter["spec"]  # left as it was
    ((_, _, reason, message),) = cluster.events
    assert (
        reason == REASON_NOT_MADE and f"ResourceClaimTemplate {template.name} in namespace team-a" in message
    )
    assert "its spec is not" in message and "Delete or rename" in message


def test_a_409_on_our_own_content_is_compared_and_accepted() -> None:
    cluster = Cluster()
    pod = admitted("hami-default-use.yaml")
    (template,) = templates_of(pod)
    cluster.put("team-a", template.manifest("team-a", made_by_webhook=True))  # the other replica made it
    reconciler(cluster, lagging=True).on_pod("ADDED", pod)
    assert cluster.creates == 1 and cluster.events == []


def test_a_deleted_template_is_made_again_for_its_pods_and_the_next_one() -> None:
    cluster = Cluster()
    r = reconciler(cluster)
    first = admitted("hami-default-use.yaml")
    r.on_pod("ADDED", first)
    ((key, made),) = cluster.templates.items()
    del cluster.templates[key]
    r.on_template("DELETED", made)
    assert key in cluster.templates
    del cluster.templates[key]
    r.on_template("DELETED", made)
    r.on_pod("DELETED", first)
    del cluster.templates[key]
    r.on_template("DELETED", made)
    assert key not in cluster.templates  # no live pod references it
    r.on_pod("ADDED", admitted("hami-default-use.yaml", "next", uid="pod-2"))
    assert key in cluster.templates


def test_unused_templates_of_the_webhook_go_after_the_grace_period_gitops_ones_stay() -> None:
    made, swept = metrics.TEMPLATES_MADE._value.get(), metrics.TEMPLATES_SWEPT._value.get()
    cluster, clock = Cluster(), Clock()
    r = reconciler(cluster, clock=clock)
    done, running = admitted("hami-default-use.yaml", "done"), admitted("volcano-vgpu.yaml", "run", uid="u2")
    r.on_pod("ADDED", done)
    r.on_pod("ADDED", running)
    (gitops,) = templates_of(admitted("hami-memory-fraction.yaml"))
    cluster.put("team-a", gitops.manifest("team-a"))  # `tessera convert`'s, no pod uses it
    r.on_pod("MODIFIED", {**done, "status": {"phase": "Succeeded"}})
    r.resync()
    clock.now += GRACE - 1
    r.resync()
    assert len(cluster.templates) == 3
    clock.now += 1
    r.resync()
    kept = {name for _, name in cluster.templates}
    assert kept == {templates_of(running)[0].name, gitops.name}
    # tessera_webhook_templates_{made,swept}_total: the two it made, the one it deleted, not the gitops one
    counted = (metrics.TEMPLATES_MADE._value.get() - made, metrics.TEMPLATES_SWEPT._value.get() - swept)
    assert counted == (2, 1)


def test_a_pod_admitted_after_the_sweep_gets_its_template_back() -> None:
    cluster, clock = Cluster(), Clock()
    r = reconciler(cluster, clock=clock)
    pod = admitted("hami-default-use.yaml")
    r.on_pod("ADDED", pod)
    ((key, made),) = cluster.templates.items()
    r.on_pod("DELETED", pod)
    r.resync()
    clock.now += GRACE
    r.resync()
    assert cluster.templates == {}
    r.on_pod("ADDED", admitted("hami-default-use.yaml", "again", uid="pod-3"))
    r.on_template("DELETED", made)  # the sweep's own deletion, seen late by the watch
    assert key in cluster.templates


def test_api_errors_are_retried_by_the_next_resync() -> None:
    cluster = Cluster()
    cluster.fail_next = [("the API server is away", 503)]
    r = reconciler(cluster)
    r.on_pod("ADDED", admitted("hami-default-use.yaml"))
    assert cluster.templates == {} and cluster.events == []
    r.resync()
    assert len(cluster.templates) == 1


def test_a_template_the_api_server_refuses_is_told_to_the_pod_once() -> None:
    """On Kubernetes 1.35 a distinctAttribute constraint is refused: admission used to say so; now the Pod
    is admitted and waits, so the Event must say it."""
    cluster = Cluster()
    refused = (
        "create ResourceClaimTemplate team-a/x: spec.spec.devices.constraints[0].matchAttribute: Required"
    )
    cluster.fail_next = [(refused, 422), (refused, 422)]
    r = reconciler(cluster)
    r.on_pod("ADDED", admitted("hami-default-use.yaml"))
    r.resync()
    ((_, _, reason, message),) = cluster.events
    assert reason == REASON_NOT_MADE and message.startswith(refused) and "cannot be made" in message


def test_a_pod_whose_claims_are_made_needs_nothing_whatever_its_record_says_now() -> None:
    """After a catalog change (a new product), a running pod's record gives another name: it has its claim,
    so it is neither warned nor given a template; nor is one whose template is there."""
    cluster = Cluster()
    pod = admitted("hami-memory-fraction.yaml")
    fewer = Options(Catalog(known_products().products[:1]), replace_schedulers=("volcano",))
    r = TemplateReconciler(calls=cluster, store=Store(cluster), options=lambda: fewer, grace_s=GRACE)
    r.ready.set()
    claimed = {**pod, "status": {"phase": "Running", "resourceClaimStatuses": [
        {"name": "tessera-gpu-0", "resourceClaimName": "p-tessera-gpu-0-abcde"}]}}  # fmt: skip
    r.on_pod("ADDED", claimed)
    assert cluster.templates == {} and cluster.events == []
    (template,) = templates_of(pod)
    cluster.put("team-a", template.manifest("team-a", made_by_webhook=True))
    r.on_pod("ADDED", admitted("hami-memory-fraction.yaml", "q", uid="pod-2"))
    assert cluster.events == [] and len(cluster.templates) == 1
    del cluster.templates[("team-a", template.name)]
    r.on_pod("MODIFIED", admitted("hami-memory-fraction.yaml", "q", uid="pod-2"))
    ((where, _, _, message),) = cluster.events  # now it needs it, and cannot have it
    assert where == "team-a/q" and "GPU products offered that changed" in message
    assert cluster.templates == {}


def test_a_pod_claim_that_is_not_the_conversions_is_left_alone() -> None:
    cluster = Cluster()
    pod = admitted("hami-default-use.yaml")
    pod["spec"]["resourceClaims"].append({"name": "mine", "resourceClaimTemplateName": "tessera-mine"})
    reconciler(cluster).on_pod("ADDED", pod)
    assert len(cluster.templates) == 1 and cluster.events == []


def test_a_template_stored_without_fields_of_a_gate_that_is_off_is_told_with_the_gates() -> None:
    cluster = Cluster()
    cluster.gate_off = True
    r = reconciler(cluster)
    r.on_pod("ADDED", admitted("hami-default-use.yaml"))
    r.on_pod("ADDED", admitted("hami-default-use.yaml", "q", uid="pod-2"))
    assert len(cluster.templates) == 1  # kept: the sweep removes it once unused
    for _, _, _, message in cluster.events:
        assert "stored it without spec.spec.devices.requests[0].exactly.capacity" in message
        assert "feature gate" in message and "Turn the gates on" in message
    assert len(cluster.events) == 2  # one per pod


@pytest.mark.parametrize(
    ("change", "alive"),
    [
        ({}, True),
        ({"status": {"phase": "Running"}}, True),
        ({"status": {"phase": "Succeeded"}}, False),
        ({"status": {"phase": "Failed"}}, False),
        ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}}, False),
        ({"metadata": {"deletionTimestamp": "2026-01-01T00:00:00Z"}, "spec": {"nodeName": "n"}}, True),
    ],
)
def test_live_is_the_resourceclaim_controllers_rule(change: dict[str, Any], alive: bool) -> None:
    pod = admitted("hami-default-use.yaml")
    for k, v in change.items():
        pod[k] = {**pod[k], **v}
    assert live(pod) is alive


@pytest.mark.parametrize("example", ["hami-default-use.yaml", "hami-dynamic-mig.yaml", "volcano-vgpu.yaml"])
def test_the_watch_keeps_what_the_derivation_reads(example: str) -> None:
    pod = admitted(example)
    pod["spec"]["containers"][0]["env"] = [{"name": names.SM_POLICY_ENV, "value": "force"}]
    pod["metadata"]["annotations"]["other"] = "x" * 10_000
    kept = keep_pod(pod)
    assert rederive(kept["metadata"], kept["spec"], OPTIONS) == rederive(
        pod["metadata"], pod["spec"], OPTIONS
    )
    assert len(json.dumps(kept)) < len(json.dumps(pod)) - 10_000
