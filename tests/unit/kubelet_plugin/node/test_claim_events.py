"""Which pods a claim's Warning Event also goes to (kubelet_plugin/node/claim_events.py): its
`status.reservedFor`, which a tenant can influence, read as untrusted."""

from __future__ import annotations

from typing import Any

import pytest
from hypothesis import given
from hypothesis import strategies as st
from kubernetes.client import ApiClient

from kubelet_plugin.node.claim_events import MAX_PODS, ClaimEvents, reserved_pods


class NoCalls(ApiClient):
    def call_api(self, *args: Any, **kwargs: Any) -> Any:
        raise AssertionError(f"an API call: {args[:2]}")


def claim_for(*consumers: Any) -> dict[str, Any]:
    return {
        "metadata": {"name": "c", "namespace": "ns", "uid": "u"},
        "spec": {},
        "status": {"reservedFor": list(consumers)},
    }


def pod(name: Any, uid: Any = "pod-uid", resource: str = "pods", group: str | None = "") -> dict[str, Any]:
    entry = {"resource": resource, "name": name, "uid": uid}
    return entry if group is None else {**entry, "apiGroup": group}


def test_the_pods_a_claim_is_reserved_for_sorted() -> None:
    c = claim_for(pod("web-1", "b"), pod("web-0", "a"), pod("web-0", "a"))
    assert reserved_pods(c) == (("web-0", "a"), ("web-1", "b"))


def test_other_consumers_bad_names_and_missing_uids_are_left_out() -> None:
    c = claim_for(
        pod("job", resource="jobs"),
        pod("x", group="batch"),
        pod("Not_A_Name"),
        pod("a" * 254),
        pod("no-uid", uid=""),
        pod("long-uid", uid="u" * 65),
        pod("ok"),
    )
    assert reserved_pods(c) == (("ok", "pod-uid"),)


def test_a_claim_without_status_or_reservations_names_no_pod() -> None:
    assert reserved_pods({"spec": {}}) == ()
    assert reserved_pods(claim_for()) == ()
    assert reserved_pods(object()) == ()
    assert reserved_pods({"status": {"reservedFor": "pods"}}) == ()


def test_entries_of_the_wrong_shape_are_left_out() -> None:
    c = claim_for("web-0", ["pods"], None, pod(7), pod("ok", uid=7), pod("fine"))
    assert reserved_pods(c) == (("fine", "pod-uid"),)


@given(st.lists(st.from_regex(r"[a-z][a-z0-9-]{0,20}[a-z0-9]", fullmatch=True), max_size=40))
def test_at_most_max_pods_are_named(names: list[str]) -> None:
    found = reserved_pods(claim_for(*(pod(n, f"uid-{n}") for n in names)))
    assert len(found) == min(MAX_PODS, len(set(names)))
    assert list(found) == sorted(found)


@pytest.mark.parametrize(("namespace", "name"), [("", "c"), ("ns", ".."), (".", "c")])
def test_a_claim_no_object_can_be_named_gets_no_event_and_no_call(namespace: str, name: str) -> None:
    events = ClaimEvents(api=NoCalls(), node_name="node-1")
    assert events.warn(namespace=namespace, name=name, uid="u", reason="R", message="m") == 0
