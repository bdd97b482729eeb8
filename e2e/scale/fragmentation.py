"""`python -m e2e.scale.fragmentation` (`make bench-order`): the device order against fragmentation, on the
real kube-scheduler.

One 8 x H100 node per order (published by the real publisher, no kubelet), the same seeded stream of claims
arriving and leaving (MIG 1g/2g/3g/4g/7g, vgpu of random sizes, whole GPUs; e2e.scale.workloads) played
against each, one event at a time: an arrival is a claim and a pod pinned to the node, waited for until the
scheduler binds it or marks it Unschedulable; a departure deletes a random live pod and its claim and waits
until the claim is gone. A run ends at the first arrival the scheduler cannot place. Printed per order and
seed: arrivals placed before that failure, and the GPU memory allocated at that point.
"""

from __future__ import annotations

import argparse
import contextlib
import random
import sys
import tempfile
import time
from collections.abc import Callable, Iterable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s
from kubernetes.client.exceptions import ApiException
from kubernetes.utils import parse_quantity

from dra_driver.core.device_order import DeviceOrder
from dra_driver.core.settings import NodeSettings
from dra_driver.system.logs import configure
from dra_driver.values.names import Cap
from e2e.bench import pod as bench_pod
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.launcher import start_control_plane
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.kube import Kubectl, get_claim, wait_for
from e2e.kubelet_standin.errors import StandInError
from e2e.published_node import published_node
from e2e.scale.workloads import Want, random_want
from e2e.testbed import H100_NODE, apply_device_classes
from e2e.verdicts import scheduler_verdict

GIB = 1024**3
Event = tuple[str, Any]  # ("arrive", Want) or ("depart", a fraction in [0, 1) choosing the live claim)


def seeded_events(seed: int, *, p_depart: float) -> Iterator[Event]:
    """An endless stream: departures with probability `p_depart` (when something is live), else arrivals."""
    rng = random.Random(seed)
    while True:
        if rng.random() < p_depart:
            yield ("depart", rng.random())
        else:
            yield ("arrive", random_want(rng))


@dataclass(frozen=True, slots=True)
class Outcome:
    order: str
    placed: int  # arrivals placed before the first failure
    memory_bytes: int  # GPU memory allocated when it came
    failed: str | None  # the kind that could not be placed (None: the stream ran out first)
    events: int
    devices: tuple[str, ...]  # the device each placed arrival got, in order


@dataclass(slots=True)
class _Live:
    pod: str
    claim: str
    memory: int


class DisagreementError(StandInError):
    """`tessera explain` predicted another device than the scheduler picked."""


def _bytes(quantity: str) -> int:
    return int(parse_quantity(quantity))  # type: ignore[no-untyped-call]


def _memory(result: dict[str, Any], capacity: dict[str, int]) -> int:
    consumed = (result.get("consumedCapacity") or {}).get(Cap.MEMORY)
    return _bytes(consumed) if consumed else capacity[result["device"]]


def _gone(api: k8s.ApiClient, namespace: str, claim: str) -> Callable[[], bool]:
    return lambda: get_claim(api, namespace, claim) is None


def _named(claim: str) -> Callable[[Any], str]:
    return lambda _pod: claim


def play(
    api: k8s.ApiClient,
    *,
    namespace: str,
    node: str,
    order: str,
    capacity: dict[str, int],
    events: Iterable[Event],
    max_arrivals: int = 400,
    predict: Callable[[str], str | None] | None = None,
) -> Outcome:
    """Plays `events` against `node` until an arrival fails. `capacity`: device → memory bytes of the node's
    exclusive devices. `predict(claim)`, when given, is asked before each pod is made and must name the
    device the scheduler then picks (None: that nothing fits)."""
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    live: list[_Live] = []
    devices: list[str] = []
    count = 0
    failed: str | None = None
    for count, (kind, value) in enumerate(events, start=1):  # noqa: B007 - count is reported
        if kind == "depart":
            if live:
                gone = live.pop(int(value * len(live)))
                core.delete_namespaced_pod(gone.pod, namespace, grace_period_seconds=0)
                resource.delete_namespaced_resource_claim(gone.claim, namespace)
                wait_for(f"claim {gone.claim} to go", _gone(api, namespace, gone.claim))
            continue
        want: Want = value
        k = len(devices)
        claim, pod = f"c{k:04d}", f"p{k:04d}"
        resource.create_namespaced_resource_claim(
            namespace, k8s.ResourceV1ResourceClaim.model_validate(want.claim(claim, namespace))
        )
        predicted = predict(claim) if predict is not None else None
        body = bench_pod(pod, claim=claim, node_selector={"kubernetes.io/hostname": node})
        core.create_namespaced_pod(namespace, k8s.V1Pod.model_validate(body))
        verdict = scheduler_verdict(api, namespace, pod, claim_name=_named(claim))
        if predict is not None and predicted != (verdict.results[0]["device"] if verdict.bound else None):
            raise DisagreementError(
                f"tessera explain predicted {predicted} for {want.kind}, the scheduler said "
                f"{verdict.results[0]['device'] if verdict.bound else verdict.message}"
            )
        if not verdict.bound:
            failed = want.kind
            break
        (result,) = verdict.results
        live.append(_Live(pod, claim, _memory(result, capacity)))
        devices.append(str(result["device"]))
        if len(devices) >= max_arrivals:
            break
    return Outcome(order, len(devices), sum(x.memory for x in live), failed, count, tuple(devices))


def clean(api: k8s.ApiClient, namespace: str) -> None:
    k8s.CoreV1Api(api).delete_collection_namespaced_pod(namespace, grace_period_seconds=0)
    k8s.ResourceV1Api(api).delete_collection_namespaced_resource_claim(namespace)
    wait_for(
        f"claims of {namespace} to go",
        lambda: not k8s.ResourceV1Api(api).list_namespaced_resource_claim(namespace).items,
        timeout_s=120,
    )


def exclusive_memory(slices: Sequence[dict[str, Any]]) -> dict[str, int]:
    return {
        d["name"]: _bytes(d["capacity"][Cap.MEMORY]["value"])
        for s in slices
        for d in s["spec"].get("devices") or []
        if not d.get("allowMultipleAllocations")
    }


def node_file_with(directory: Path, gpus: int) -> Path:
    """A node file of `gpus` H100s (for small cases)."""
    raw = yaml.safe_load(H100_NODE.read_text(encoding="utf-8"))
    raw["gpus"] = [{**raw["gpus"][0], "count": gpus}]
    path = directory / f"h100x{gpus}.yaml"
    path.write_text(yaml.safe_dump(raw), encoding="utf-8")
    return path


@contextlib.contextmanager
def ordered_node(
    api: k8s.ApiClient, order: DeviceOrder, *, node_file: Path = H100_NODE, prefix: str = "frag"
) -> Iterator[Any]:
    """Node `<prefix>-<order>`, published with `order`."""
    name = f"{prefix}-{order.value}"
    settings = NodeSettings(node_name=name, device_order=order)
    with published_node(api, node_file=node_file, name=name, settings=settings) as node:
        yield node


def namespace(api: k8s.ApiClient, name: str) -> str:
    core = k8s.CoreV1Api(api)
    with contextlib.suppress(ApiException):
        core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": name}}))
    wait_for_service_account(api, name)
    return name


def parse_seeds(text: str) -> list[int]:
    first, dash, last = text.partition("-")
    if dash:
        return list(range(int(first), int(last) + 1))
    return [int(s) for s in text.split(",") if s.strip()]


def summary(totals: dict[str, list[Outcome]]) -> list[str]:
    lines = []
    for order_name, outcomes in totals.items():
        placed = sum(o.placed for o in outcomes)
        memory = sum(o.memory_bytes for o in outcomes) / GIB / max(len(outcomes), 1)
        lines.append(
            f"total order={order_name} seeds={len(outcomes)} placed={placed} mean_memory_gib={memory:.1f}"
        )
    old, new = (totals[o.value] for o in (DeviceOrder.BY_GPU, DeviceOrder.FRAGMENTATION_AWARE))
    pairs = list(zip(old, new, strict=True))
    lines.append(
        f"per seed, {DeviceOrder.FRAGMENTATION_AWARE.value} vs {DeviceOrder.BY_GPU.value}: "
        f"more placed {sum(n.placed > o.placed for o, n in pairs)}, "
        f"fewer {sum(n.placed < o.placed for o, n in pairs)}, "
        f"same {sum(n.placed == o.placed for o, n in pairs)}"
    )
    return lines


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m e2e.scale.fragmentation", description=__doc__)
    parser.add_argument("--seeds", default="1-20", help="seeds of the event stream: 1-20 or 1,4,9")
    parser.add_argument("--p-depart", type=float, default=0.45, help="probability an event is a departure")
    args = parser.parse_args(argv)
    configure(level="warning")
    seeds = parse_seeds(args.seeds)
    binaries = ensure_built(allow_build=True)
    orders = (DeviceOrder.BY_GPU, DeviceOrder.FRAGMENTATION_AWARE)
    totals: dict[str, list[Outcome]] = {o.value: [] for o in orders}
    with tempfile.TemporaryDirectory(prefix="tessera-order-") as tmp:
        plane = start_control_plane(state_dir=Path(tmp) / "controlplane", binaries=binaries)
        try:
            api = plane.api_client()
            apply_device_classes(Kubectl(binary=plane.binaries.kubectl, kubeconfig=plane.kubeconfig))
            for order in orders:
                with ordered_node(api, order) as node:
                    ns = namespace(api, f"frag-{order.value}")
                    for seed in seeds:
                        started = time.monotonic()
                        outcome = play(
                            api,
                            namespace=ns,
                            node=node.name,
                            order=order.value,
                            capacity=exclusive_memory(node.slices),
                            events=seeded_events(seed, p_depart=args.p_depart),
                        )
                        clean(api, ns)
                        totals[order.value].append(outcome)
                        print(
                            f"order={order.value} seed={seed} p_depart={args.p_depart} "
                            f"placed={outcome.placed} "
                            f"memory_gib={outcome.memory_bytes / GIB:.1f} first_failure={outcome.failed} "
                            f"events={outcome.events} seconds={time.monotonic() - started:.0f}",
                            flush=True,
                        )
        finally:
            plane.stop()
    for text in summary(totals):
        print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
