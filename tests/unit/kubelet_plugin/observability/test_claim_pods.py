"""The claims' pods for the metrics' labels: read from `status.reservedFor` (never trusted, bounded), noted
whenever the daemon reads a claim, and read again by a bounded loop for claims it has not seen."""

from __future__ import annotations

from typing import Any

from hypothesis import given
from hypothesis import strategies as st

from dra_driver.vocabulary.errors import ClaimError, ClaimNotFoundError
from dra_driver.vocabulary.names import ClaimUID
from kubelet_plugin.claims.api import claim_from_dict
from kubelet_plugin.observability.claim_pods import (
    MAX_NAME,
    MAX_PODS,
    READS_PER_ROUND,
    RECHECK_S,
    ClaimPods,
    PodNotingSource,
    label_value,
    pod_names,
)
from kubelet_plugin.record.results import ClaimRef


def pod(name: str, *, resource: str = "pods", group: str = "") -> dict[str, str]:
    return {"apiGroup": group, "resource": resource, "name": name, "uid": f"uid-{name}"}


def claim_object(name: str, uid: str, consumers: list[dict[str, str]]) -> Any:
    return claim_from_dict(
        {
            "metadata": {"name": name, "namespace": "ns", "uid": uid},
            "spec": {"devices": {"requests": []}},
            "status": {"reservedFor": consumers},
        }
    )


def prepared(name: str) -> ClaimRef:
    return ClaimRef("ns", name, ClaimUID(f"uid-{name}"))


class Claims:
    """A claim source over objects the test sets, counting its reads."""

    def __init__(self) -> None:
        self.objects: dict[str, Any] = {}
        self.reads: list[str] = []
        self.down = False

    def set(self, name: str, *pods: str, uid: str | None = None) -> None:
        self.objects[name] = claim_object(name, uid or f"uid-{name}", [pod(p) for p in pods])

    def get(self, *, namespace: str, name: str) -> Any:
        self.reads.append(name)
        if self.down:
            raise ClaimError("reading ResourceClaim: 503 Service Unavailable")
        if name not in self.objects:
            raise ClaimNotFoundError(name)
        return self.objects[name]


def test_only_core_pods_with_valid_names_count_sorted() -> None:
    c = claim_object(
        "c",
        "u",
        [
            pod("web-2"),
            pod("web-1"),
            pod("web-1"),  # twice: once
            pod("job", resource="jobs", group="batch"),  # not a pod
            pod("fake", group="example.com"),  # a "pods" resource of another group
            pod("Bad_Name"),
            pod("x" * (MAX_NAME + 1)),
            pod('a"b\nc'),  # would break the exposition format
        ],
    )
    assert pod_names(c) == ("web-1", "web-2")
    assert pod_names(claim_object("c", "u", [])) == ()
    assert pod_names(object()) == ()  # no status at all: no pods


def test_a_label_names_at_most_max_pods_and_counts_the_rest() -> None:
    names = [f"p{i:02}" for i in range(MAX_PODS + 3)]
    assert label_value(names[:2]) == "p00,p01"
    assert label_value(names) == ",".join(names[:MAX_PODS]) + ",+3"


@given(
    st.lists(
        st.fixed_dictionaries(
            {
                "resource": st.sampled_from(["pods", "Pods", "jobs", ""]),
                "apiGroup": st.sampled_from(["", "apps", "x.y"]),
                "name": st.text(
                    alphabet=st.sampled_from('ab-.Z_"\\\n09é'), min_size=0, max_size=MAX_NAME + 20
                ),
                "uid": st.just("u"),
            }
        ),
        max_size=40,
    )
)
def test_whatever_reserved_for_holds_the_label_stays_bounded(consumers: list[dict[str, str]]) -> None:
    names = pod_names(claim_object("c", "u", consumers))
    assert names is not None and list(names) == sorted(set(names))
    for n in names:
        assert n and len(n) <= MAX_NAME and set(n) <= set("ab-.09")
        assert any(c["name"] == n and c["resource"] == "pods" and not c["apiGroup"] for c in consumers)
    value = label_value(names)
    assert len(value) <= MAX_PODS * (MAX_NAME + 1) + 4
    assert '"' not in value and "\\" not in value and "\n" not in value


def test_a_claim_read_by_the_daemon_notes_its_pods_for_free() -> None:
    claims, pods = Claims(), ClaimPods()
    claims.set("a", "trainer-0")
    source = PodNotingSource(claims, pods)
    assert source.get(namespace="ns", name="a") is claims.objects["a"]
    assert pods.pods(ClaimUID("uid-a")) == "trainer-0"
    assert pods.version() == 1
    source.get(namespace="ns", name="a")  # the same again: nothing moved
    assert pods.version() == 1


def test_the_loop_reads_unseen_claims_then_rechecks_them_bounded() -> None:
    now = [0.0]
    claims, pods = Claims(), ClaimPods(clock=lambda: now[0])
    for i in range(READS_PER_ROUND + 4):
        claims.set(f"c{i}", f"pod-{i}")
    live = [prepared(f"c{i}") for i in range(READS_PER_ROUND + 4)]
    assert pods.refresh(live, claims) == READS_PER_ROUND  # bounded: the rest next round
    assert pods.refresh(live, claims) == 4
    assert all(pods.pods(c.uid) == f"pod-{c.name[1:]}" for c in live)
    assert pods.refresh(live, claims) == 0  # all known, none stale yet
    claims.set("c0", "pod-0", "pod-0b")  # a shared claim gains a pod
    now[0] += RECHECK_S
    claims.reads.clear()
    pods.refresh(live, claims)
    assert claims.reads[0] == "c0" and len(claims.reads) == READS_PER_ROUND  # oldest reads first
    assert pods.pods(ClaimUID("uid-c0")) == "pod-0,pod-0b"


def test_unreadable_claims_keep_what_was_known_and_gone_claims_are_forgotten() -> None:
    now = [0.0]
    claims, pods = Claims(), ClaimPods(clock=lambda: now[0])
    claims.set("a", "web")
    claims.set("b", "other", uid="a-new-claim-of-that-name")  # not the prepared claim
    pods.refresh([prepared("a"), prepared("b")], claims)
    assert pods.pods(ClaimUID("uid-a")) == "web"
    assert pods.pods(ClaimUID("uid-b")) == ""
    claims.down = True
    now[0] += RECHECK_S
    claims.reads.clear()
    pods.refresh([prepared("a")], claims)
    assert claims.reads == ["a"] and pods.pods(ClaimUID("uid-a")) == "web"
    claims.reads.clear()
    pods.refresh([prepared("a")], claims)
    assert claims.reads == []  # a failed read waits for the next recheck, not the next round
    version = pods.version()
    pods.refresh([], claims)  # unprepared
    assert pods.pods(ClaimUID("uid-a")) == "" and pods.version() == version + 1


def test_a_claim_noted_by_its_prepare_keeps_its_pods_until_the_checkpoint_lists_it() -> None:
    now = [0.0]
    claims, pods = Claims(), ClaimPods(clock=lambda: now[0])
    claims.set("a", "web")
    claims.set("b", "batch")
    PodNotingSource(claims, pods).get(namespace="ns", name="a")  # prepare's read, before its commit
    pods.refresh([], claims)  # a round before the checkpoint records the claim
    assert pods.pods(ClaimUID("uid-a")) == "web"
    claims.reads.clear()
    pods.refresh([prepared("a")], claims)  # committed: already known, not read again
    assert claims.reads == [] and pods.pods(ClaimUID("uid-a")) == "web"
    pods.refresh([], claims)  # unprepared: forgotten at once
    assert pods.pods(ClaimUID("uid-a")) == ""
    PodNotingSource(claims, pods).get(namespace="ns", name="b")  # a prepare that failed: never listed
    now[0] += RECHECK_S - 1
    pods.refresh([], claims)
    assert pods.pods(ClaimUID("uid-b")) == "batch"
    now[0] += 1
    pods.refresh([], claims)
    assert pods.pods(ClaimUID("uid-b")) == ""
