"""`tessera gpu cordon|drain|uncordon NODE GPU` and `tessera gpu list [NODE]`: an administrator takes one GPU
out of service without cordoning its node (docs/operations.md).

The command writes the Node's `gpu.tessera.dev/cordon` annotation (dra_driver/core/cordon.py) with the
Node's resourceVersion as a precondition, so two administrators never lose each other's change; the node
daemon reads it within READ_INTERVAL_S and taints every device of the GPU. `--wait` waits until the node's
ResourceSlices show it. Kubernetes does the rest: the scheduler places no new claim on a tainted device, and
its device-taint eviction removes the pods of a drained one.
"""

from __future__ import annotations

import argparse
import os
import re
import sys
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from dra_driver.core import families
from dra_driver.core.cordon import (
    GpuCordon,
    parse_cordons,
    render_cordons,
    with_cordon,
    without_cordon,
)
from dra_driver.core.gpu_health import Effect
from dra_driver.io.api_client import api_client
from dra_driver.io.api_objects import NODE, NODES, SLICES, field_at, path
from dra_driver.vocabulary.errors import ConfigError, InvalidNameError, TesseraError
from dra_driver.vocabulary.names import CORDON_ANNOTATION, CORDON_TAINT_KEY, DRIVER_NAME

_GPU = re.compile(r"(?:gpu-)?(0|[1-9][0-9]?)")
CONFLICT_RETRIES = 5
WAIT_POLL_S = 1.0
EFFECTS = {"cordon": Effect.NO_SCHEDULE, "drain": Effect.NO_EXECUTE}
SAYS = {
    Effect.NO_SCHEDULE: "cordoned (NoSchedule): no new claim lands on its devices; running pods stay",
    Effect.NO_EXECUTE: "drained (NoExecute): Kubernetes evicts the pods whose claims hold its devices",
}


def gpu_index(text: str) -> int:
    """`gpu-3` or `3` → 3; ConfigError naming the argument."""
    m = _GPU.fullmatch(text.strip())
    if m is None:
        raise ConfigError(
            f"GPU {text[:32]!r}: give it as gpu-<index> (as `tessera gpu list NODE` shows) or <index>"
        )
    return int(m.group(1))


def default_kubeconfig() -> Path | None:
    """$KUBECONFIG's first file or ~/.kube/config, where it exists; None: the in-cluster service account."""
    named = os.environ.get("KUBECONFIG", "").split(os.pathsep)[0]
    for candidate in (Path(named) if named else None, Path.home() / ".kube" / "config"):
        if candidate is not None and candidate.is_file():
            return candidate
    return None


class NodeCordons:
    """The cordons of the cluster's Nodes through the API: read, change (with the Node's resourceVersion as a
    precondition), and the node's published GPUs and taints. Plain JSON (RestCalls): the typed API classes
    would cost every `tessera gpu` call about 2 CPU-s to import."""

    def __init__(self, api: Any) -> None:
        from dra_driver.io.rest_calls import RestCalls  # noqa: PLC0415 - other commands never load it

        self._rest = RestCalls(api)

    def _node(self, node: str) -> dict[str, Any]:
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        try:
            return self._rest.get(path(NODE, name=node))
        except ApiException as e:
            if e.status == 404:
                raise ConfigError(f"node {node!r} does not exist (kubectl get nodes lists them)") from e
            raise TesseraError(f"cannot read node {node!r}: {e.status} {e.reason}") from e

    def read(self, node: str) -> tuple[dict[int, GpuCordon], str]:
        """The node's cordons and the resourceVersion they were read at."""
        metadata = field_at(self._node(node), "metadata") or {}
        annotations = metadata.get("annotations") or {}
        try:
            cordons = parse_cordons(annotations.get(CORDON_ANNOTATION, ""))
        except ConfigError as e:
            raise ConfigError(f"node {node}: {e}; fix or remove the annotation with kubectl annotate") from e
        return cordons, str(metadata.get("resourceVersion", ""))

    def write(self, node: str, cordons: dict[int, GpuCordon], resource_version: str) -> bool:
        """False when the Node changed since it was read (the caller reads again)."""
        from kubernetes.client.exceptions import ApiException  # noqa: PLC0415

        # the last uncordon removes the annotation (a merge patch's null)
        value = render_cordons(cordons) or None
        body = {"metadata": {"resourceVersion": resource_version, "annotations": {CORDON_ANNOTATION: value}}}
        try:
            self._rest.patch(path(NODE, name=node), body)
        except ApiException as e:
            if e.status == 409:
                return False
            raise TesseraError(f"cannot change node {node!r}: {e.status} {e.reason}") from e
        return True

    def all(self) -> dict[str, dict[int, GpuCordon]]:
        """Every Node with a cordoned GPU (a bad annotation is shown as an error, not raised)."""
        out: dict[str, dict[int, GpuCordon]] = {}
        for obj in self._rest.get(NODES).get("items") or []:
            metadata = obj.get("metadata") or {}
            name, text = str(metadata.get("name")), (metadata.get("annotations") or {}).get(CORDON_ANNOTATION)
            if text:
                try:
                    out[name] = parse_cordons(text)
                except ConfigError as e:
                    sys.stderr.write(f"tessera gpu list: node {name}: {e}\n")
        return out

    def published(self, node: str) -> dict[int, set[str]]:
        """GPU index → the cordon taint values its published devices carry ('' for an untainted device)."""
        slices = self._rest.get(SLICES, fieldSelector=f"spec.nodeName={node}").get("items") or []
        gpus: dict[int, set[str]] = {}
        for s in slices:
            spec = s.get("spec") or {}
            if spec.get("driver") != DRIVER_NAME:
                continue
            for d in spec.get("devices") or ():
                try:
                    index = families.parse_device_name(str(d.get("name"))).index
                except InvalidNameError:
                    continue
                taints = d.get("taints") or ()
                marks = [t.get("value") or "" for t in taints if t.get("key") == CORDON_TAINT_KEY]
                gpus.setdefault(index, set()).update(marks or [""])
        return gpus


def change(
    cordons: NodeCordons, node: str, index: int, edit: Callable[[dict[int, GpuCordon]], dict[int, GpuCordon]]
) -> dict[int, GpuCordon]:
    """Apply `edit` to the node's cordons, again on a fresh read when someone else changed the Node."""
    for _ in range(CONFLICT_RETRIES):
        current, version = cordons.read(node)
        wanted = edit(current)
        if wanted == current or cordons.write(node, wanted, version):
            return wanted
    raise TesseraError(f"node {node} kept changing under {CONFLICT_RETRIES} tries; run the command again")


def wait_published(cordons: NodeCordons, node: str, index: int, value: str, timeout_s: float) -> None:
    """Until every published device of the GPU carries exactly the cordon taint `value` ('' for none)."""
    deadline = time.monotonic() + timeout_s
    while True:
        seen = cordons.published(node).get(index, set())
        if seen == {value}:
            return
        if time.monotonic() >= deadline:
            raise TesseraError(
                f"node {node}: gpu-{index}'s devices do not show it after {timeout_s:.0f} s (published: "
                f"{sorted(seen) or 'no device'}); is the Tessera plugin running there?"
            )
        time.sleep(WAIT_POLL_S)


def _run(args: argparse.Namespace) -> int:
    index = gpu_index(args.gpu) if args.action != "list" else 0  # bad input refused before any API call
    cordons = NodeCordons(api_client(Path(args.kubeconfig) if args.kubeconfig else default_kubeconfig()))
    if args.action == "list":
        return _list(cordons, args.node)
    node = args.node
    cordons.read(node)  # a node that does not exist, or whose annotation is bad, is refused first
    if not args.force and index not in cordons.published(node):
        raise ConfigError(
            f"node {node} publishes no device of gpu-{index} (`tessera gpu list {node}` shows its GPUs); "
            "--force writes the cordon anyway, for a GPU the plugin does not publish now"
        )
    if args.action == "uncordon":
        change(cordons, node, index, lambda c: without_cordon(c, index))
        said, value = "uncordoned: new claims may land on its devices again", ""
    else:
        effect = EFFECTS[args.action]
        change(cordons, node, index, lambda c: with_cordon(c, index, effect, now=int(time.time())))
        said, value = SAYS[effect], "cordon" if effect is Effect.NO_SCHEDULE else "drain"
    if args.wait > 0:
        wait_published(cordons, node, index, value, args.wait)
    sys.stdout.write(f"node {node}: gpu-{index} {said}\n")
    return 0


def _list(cordons: NodeCordons, node: str | None) -> int:
    if node is None:
        table = cordons.all()
        for name in sorted(table):
            for index, cordon in sorted(table[name].items()):
                sys.stdout.write(f"{name}\tgpu-{index}\t{cordon.effect.value}\n")
        return 0
    current, _ = cordons.read(node)
    for index, marks in sorted(cordons.published(node).items()):
        c = current.get(index)
        state = c.effect.value if c is not None else "-"
        shown = ",".join(sorted(m for m in marks if m)) or "-"
        sys.stdout.write(f"gpu-{index}\tcordon={state}\tpublished={shown}\n")
    return 0


def add_cli(sub: Any) -> None:
    """Register `tessera gpu` on the `tessera` command's subparsers."""
    p = sub.add_parser(
        "gpu",
        help="cordon, drain or uncordon one GPU of a node",
        description="Take one GPU out of service without cordoning its node: cordon (no new claims), drain "
        "(and evict the pods there), uncordon (undo). Recorded on the Node (annotation "
        f"{CORDON_ANNOTATION}); the node's plugin taints the GPU's devices within about 10 s.",
    )
    actions = p.add_subparsers(dest="action", required=True)
    for action, text in (
        ("cordon", "no new claims on the GPU's devices; running pods stay"),
        ("drain", "cordon, and evict the pods whose claims hold the GPU's devices"),
        ("uncordon", "undo cordon or drain"),
    ):
        a = actions.add_parser(action, help=text)
        a.add_argument("node", help="the node's name")
        a.add_argument("gpu", help="the GPU: gpu-<index> (as its device names say) or <index>")
        a.add_argument(
            "--wait",
            type=float,
            default=0.0,
            metavar="SECONDS",
            help="wait until the node's ResourceSlices show it (the plugin reads the Node every 10 s)",
        )
        a.add_argument("--force", action="store_true", help="write it even if the node publishes no such GPU")
    lister = actions.add_parser("list", help="the cordoned GPUs of every node, or one node's GPUs")
    lister.add_argument("node", nargs="?", help="one node: each GPU, its cordon, what its devices carry")
    for a in (*actions.choices.values(),):
        a.add_argument("--kubeconfig", help="kubeconfig (default: $KUBECONFIG, ~/.kube/config, in-cluster)")
    p.set_defaults(handler=_run)
