"""`python -m e2e.benches.scale.fragmentation` (`make bench-order`): the device order against fragmentation,
on the real kube-scheduler.

One 8 x H100 node per order (published by the real publisher, no kubelet), the same seeded stream of claims
arriving and leaving (MIG 1g/2g/3g/4g/7g, vgpu of random sizes, whole GPUs; e2e.benches.scale.workloads)
played against each, one event at a time: an arrival is a claim and a pod pinned to the node, waited for until
the scheduler binds it or marks it Unschedulable; a departure deletes a random live pod and its claim and
waits until the claim is gone. A run ends at the first arrival the scheduler cannot place. Printed per order
and seed: arrivals placed before that failure, and the GPU memory allocated at that point.

`--mix aligned` adds arrivals of whole GPUs that must land together (4 of one NVLink domain and NUMA node, 2
under one PCIe switch; docs/topology.md) and, after every event, asks whether 4 and 8 such GPUs could still
be had (free GPUs of one NUMA node and NVLink domain, read from the published attributes): printed are how
many arrivals were placed when that first became impossible, and the share of placed arrivals after which it
was possible.

`--mix` may be given twice (`make bench-order` plays both mixes, each node started once, on one plane).
`--smoke` (`make bench-order SMOKE=1`, which `make test` runs): seed 1, each run stopped after 3 arrivals; its
figures mean nothing.
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
from dra_driver.io.logs import configure
from dra_driver.vocabulary.names import NUMA_NODE_ATTRIBUTE, Attr, Cap, qualified, split_device_name
from e2e.benches.pods import pod as bench_pod
from e2e.benches.scale.workloads import ALIGNED_MIX_WEIGHTS, MIX_WEIGHTS, Want, random_want
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.launcher import start_control_plane
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.harness.kube import get_claim, wait_for
from e2e.harness.published_node import published_node
from e2e.harness.server_apply import ServerApply
from e2e.harness.testbed import H100_NODE, apply_device_classes
from e2e.harness.verdicts import scheduler_verdict
from e2e.kubelet_standin.errors import StandInError

GIB = 1024**3
MAX_ARRIVALS = 400  # a run stops after this many placed arrivals even when nothing failed yet
Event = tuple[str, Any]  # ("arrive", Want) or ("depart", a fraction in [0, 1) choosing the live claim)


MIXES = {"default": MIX_WEIGHTS, "aligned": ALIGNED_MIX_WEIGHTS}


def seeded_events(seed: int, *, p_depart: float, weights: dict[str, int] = MIX_WEIGHTS) -> Iterator[Event]:
    """An endless stream: departures with probability `p_depart` (when something is live), else arrivals."""
    rng = random.Random(seed)
    while True:
        if rng.random() < p_depart:
            yield ("depart", rng.random())
        else:
            yield ("arrive", random_want(rng, weights))


@dataclass(frozen=True, slots=True)
class AlignedProbe:
    """Whether `size` whole GPUs of one NVLink domain (and, below 8, one NUMA node) are free: GPU index →
    its group, from the whole GPUs' published attributes."""

    groups: dict[int, tuple[object, object]]

    @classmethod
    def of(cls, slices: Sequence[dict[str, Any]]) -> AlignedProbe:
        groups: dict[int, tuple[object, object]] = {}
        for s in slices:
            for d in s["spec"].get("devices") or []:
                attrs = d["attributes"]
                if attrs.get(qualified(Attr.TYPE)) != {"string": "gpu"}:
                    continue
                domain = (attrs.get(qualified(Attr.NVLINK_DOMAIN)) or {}).get("string")
                numa = (attrs.get(NUMA_NODE_ATTRIBUTE) or {}).get("int")
                groups[split_device_name(d["name"])[0]] = (domain, numa)
        return cls(groups)

    def possible(self, size: int, busy: set[int]) -> bool:
        free: dict[tuple[object, object], int] = {}
        for index, (domain, numa) in self.groups.items():
            if index in busy or domain is None:
                continue
            key = (domain, numa if size < 8 else None)
            free[key] = free.get(key, 0) + 1
        return any(n >= size for n in free.values())


@dataclass(slots=True)
class _Aligned:
    """When aligned requests of 4 and 8 GPUs were first impossible, and how often they were possible."""

    lost: dict[int, int | None]
    possible: dict[int, int]

    def see(self, probe: AlignedProbe, busy: set[int], placed: int) -> None:
        for size in self.lost:
            if probe.possible(size, busy):
                self.possible[size] += 1
            elif self.lost[size] is None:
                self.lost[size] = placed


@dataclass(frozen=True, slots=True)
class Outcome:
    order: str
    placed: int  # arrivals placed before the first failure
    memory_bytes: int  # GPU memory allocated when it came
    failed: str | None  # the kind that could not be placed (None: the stream ran out first)
    events: int
    devices: tuple[str, ...]  # the device(s) each placed arrival got, in order (`+`-joined)
    aligned_lost: dict[int, int | None]  # GPUs → arrivals placed when that many aligned first were not free
    aligned_share: dict[int, float]  # GPUs → share of placed arrivals after which that many were free

    def aligned_text(self) -> str:
        def lost(size: int) -> str:
            at = self.aligned_lost.get(size)
            return "never" if at is None else str(at)

        return " ".join(
            f"x{size}_lost_at={lost(size)} x{size}_free={self.aligned_share[size]:.2f}"
            for size in sorted(self.aligned_share)
        )


@dataclass(slots=True)
class _Live:
    pod: str
    claim: str
    memory: int
    gpus: frozenset[int]


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
    max_arrivals: int = MAX_ARRIVALS,
    predict: Callable[[str], str | None] | None = None,
    probe: AlignedProbe | None = None,
) -> Outcome:
    """Plays `events` against `node` until an arrival fails. `capacity`: device → memory bytes of the node's
    exclusive devices. `predict(claim)`, when given, is asked before each pod is made and must name the
    device the scheduler then picks (None: that nothing fits). `probe`: asked after every placed arrival
    whether aligned groups of 4 and 8 GPUs are still free."""
    core, resource = k8s.CoreV1Api(api), k8s.ResourceV1Api(api)
    live: list[_Live] = []
    devices: list[str] = []
    count = 0
    failed: str | None = None
    aligned = _Aligned(lost={4: None, 8: None}, possible={4: 0, 8: 0})
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
        results = verdict.results
        gpus = frozenset(split_device_name(str(r["device"]))[0] for r in results)
        live.append(_Live(pod, claim, sum(_memory(r, capacity) for r in results), gpus))
        devices.append("+".join(str(r["device"]) for r in results))
        if probe is not None:
            aligned.see(probe, {g for x in live for g in x.gpus}, len(devices))
        if len(devices) >= max_arrivals:
            break
    placed = len(devices)
    share = {size: n / placed if placed else 0.0 for size, n in aligned.possible.items()} if probe else {}
    memory = sum(x.memory for x in live)
    return Outcome(order, placed, memory, failed, count, tuple(devices), aligned.lost, share)


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
        aligned = ""
        for size in sorted(outcomes[0].aligned_share if outcomes else ()):
            lost = [o.aligned_lost[size] for o in outcomes]
            kept = sum(o.placed if at is None else at for o, at in zip(outcomes, lost, strict=True))
            free = sum(o.aligned_share[size] for o in outcomes) / len(outcomes)
            aligned += f" x{size}_lost_at_total={kept} x{size}_free_mean={free:.2f}"
        lines.append(
            f"total order={order_name} seeds={len(outcomes)} placed={placed} mean_memory_gib={memory:.1f}"
            + aligned
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
    parser = argparse.ArgumentParser(prog="python -m e2e.benches.scale.fragmentation", description=__doc__)
    parser.add_argument("--seeds", default="1-20", help="seeds of the event stream: 1-20 or 1,4,9")
    parser.add_argument("--p-depart", type=float, default=0.45, help="probability an event is a departure")
    parser.add_argument(
        "--mix",
        action="append",
        choices=sorted(MIXES),
        help="default, or aligned: with multi-GPU aligned arrivals; repeat it to play both on one plane",
    )
    parser.add_argument("--smoke", action="store_true", help="seed 1, 3 arrivals a run (make test runs it)")
    args = parser.parse_args(argv)
    configure(level="warning")
    if args.smoke:
        args.seeds = "1"
    mixes: list[str] = list(dict.fromkeys(args.mix or ["default"]))
    seeds = parse_seeds(args.seeds)
    binaries = ensure_built(allow_build=True)
    orders = (DeviceOrder.BY_GPU, DeviceOrder.FRAGMENTATION_AWARE)
    totals: dict[str, dict[str, list[Outcome]]] = {mix: {o.value: [] for o in orders} for mix in mixes}
    with tempfile.TemporaryDirectory(prefix="tessera-order-") as tmp:
        plane = start_control_plane(state_dir=Path(tmp) / "controlplane", binaries=binaries)
        try:
            api = plane.api_client()
            apply_device_classes(ServerApply(api))
            for order in orders:
                with ordered_node(api, order) as node:
                    for mix in mixes:
                        ns = namespace(api, f"frag-{order.value}-{mix}")
                        probe = AlignedProbe.of(node.slices) if mix == "aligned" else None
                        for seed in seeds:
                            started = time.monotonic()
                            outcome = play(
                                api,
                                namespace=ns,
                                node=node.name,
                                order=order.value,
                                capacity=exclusive_memory(node.slices),
                                events=seeded_events(seed, p_depart=args.p_depart, weights=MIXES[mix]),
                                probe=probe,
                                max_arrivals=3 if args.smoke else MAX_ARRIVALS,
                            )
                            clean(api, ns)
                            totals[mix][order.value].append(outcome)
                            print(
                                f"order={order.value} mix={mix} seed={seed} p_depart={args.p_depart} "
                                f"placed={outcome.placed} "
                                f"memory_gib={outcome.memory_bytes / GIB:.1f} first_failure={outcome.failed} "
                                f"events={outcome.events} seconds={time.monotonic() - started:.0f} "
                                f"{outcome.aligned_text()}".rstrip(),
                                flush=True,
                            )
        finally:
            plane.stop()
    for mix in mixes:
        print(f"# mix={mix}")
        for text in summary(totals[mix]):
            print(text)
    return 0


if __name__ == "__main__":
    sys.exit(main())
