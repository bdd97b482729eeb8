"""A control plane with Tessera's DeviceClasses and a set of simulated GPU nodes: what the scenarios, the
demo and the benchmark run against."""

from __future__ import annotations

import contextlib
import tempfile
import uuid
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import structlog
from kubernetes import client as k8s

from e2e.controlplane.launcher import ControlPlane
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.harness.examples import device_class_files, load
from e2e.harness.kube import Kubectl, WaitTimeoutError, delete_namespace_contents, wait_for
from e2e.harness.node import NODES_DIR, BackendKind, SimNode, node_kubeconfig, node_name_of
from e2e.harness.plugin_identity import install_identity
from e2e.harness.server_apply import ServerApply
from e2e.kubelet_standin.errors import StandInError

log = structlog.get_logger(__name__)

H100_NODE = NODES_DIR / "h100x8.yaml"
MIXED_NODE = NODES_DIR / "mixed-a100-l4.yaml"


@dataclass(slots=True)
class SimCluster:
    plane: ControlPlane
    api: k8s.ApiClient
    kubectl: Kubectl
    nodes: dict[str, SimNode] = field(default_factory=dict)
    server_apply: ServerApply = field(init=False)  # how the scenarios apply manifests (server_apply.py)

    def __post_init__(self) -> None:
        self.server_apply = ServerApply(self.api)

    def node(self, name: str) -> SimNode:
        return self.nodes[name]

    def node_of(self, pod: dict[str, object]) -> SimNode:
        spec = pod["spec"]
        assert isinstance(spec, dict)
        return self.nodes[str(spec["nodeName"])]


def apply_device_classes(target: ServerApply) -> list[str]:
    """Applies the DeviceClasses of deviceclasses/*.yaml (they must apply), then the other manifests there
    (admission policies) best-effort: one the API server refuses is reported and skipped, since the
    scenarios exercise the classes, not the policies. Returns the problems."""
    documents = [d for path in device_class_files() for d in load(path)]
    classes = [d for d in documents if d.get("kind") == "DeviceClass"]
    target.apply(classes)
    problems = []
    for doc in documents:
        if doc.get("kind") == "DeviceClass":
            continue
        try:
            target.apply([doc])
        except StandInError as e:
            problems.append(f"{doc.get('kind')} {doc['metadata']['name']}: {e}")
            log.warning(
                "testbed.manifest_refused", kind=doc.get("kind"), name=doc["metadata"]["name"], error=str(e)
            )
    log.info("testbed.deviceclasses", classes=len(classes), refused=len(problems))
    return problems


def start_node(
    bed: SimCluster,
    node_file: Path,
    *,
    root: Path,
    die_with_parent: bool = True,
    labels: dict[str, str] | None = None,
    backend: BackendKind = BackendKind.SIMULATED,
    settings_file: Path | None = None,
    plugin_args: tuple[str, ...] = (),
) -> SimNode:
    """Starts one simulated node (plugin + stand-in) under `root`; its plugin runs with its own
    ServiceAccount token, bound to its plugin pod on the node, on `backend`."""
    name = node_name_of(node_file)
    node = SimNode(
        api=bed.api,
        node_file=node_file,
        root=root,
        admin_kubeconfig=bed.plane.kubeconfig,
        node_kubeconfig=node_kubeconfig(bed.plane, name),
        labels=labels,
        die_with_parent=die_with_parent,
        backend=backend,
        settings_file=settings_file,
        plugin_args=plugin_args,
    )
    try:
        node.start()
    except BaseException:
        node.stop()
        raise
    bed.nodes[name] = node
    return node


def make_testbed(plane: ControlPlane, api: k8s.ApiClient) -> SimCluster:
    kubectl = Kubectl(binary=plane.binaries.kubectl, kubeconfig=plane.kubeconfig)
    bed = SimCluster(plane=plane, api=api, kubectl=kubectl)
    apply_device_classes(bed.server_apply)
    install_identity(bed.server_apply)  # the chart's RBAC and policies: the plugins run as its ServiceAccount
    return bed


@contextlib.contextmanager
def running_nodes(
    bed: SimCluster, node_files: Sequence[Path], *, root: Path | None = None
) -> Iterator[SimCluster]:
    """Nodes for the duration of a `with` block; stopped (and their Node objects deleted) afterwards."""
    with contextlib.ExitStack() as stack:
        base = root or Path(stack.enter_context(tempfile.TemporaryDirectory(prefix="tessera-nodes-")))
        started: list[SimNode] = []
        try:
            for node_file in node_files:
                started.append(start_node(bed, node_file, root=base / node_file.stem))
            yield bed
        finally:
            for node in started:
                node.stop()
                bed.nodes.pop(node.name, None)


def leftovers(testbed: SimCluster) -> list[str]:
    """What the testbed's nodes still hold of finished scenarios: CDI specs, claim dirs, MPS control daemons,
    MIG instances, pod records."""
    found: list[str] = []
    for node in testbed.nodes.values():
        found += [f"{node.name}: CDI spec {p.name}" for p in node.cdi_specs()]
        found += [f"{node.name}: claim dir {p.name}" for p in node.claim_dirs()]
        found += [f"{node.name}: MPS control daemon of {p.name}" for p in node.mps_dirs()]
        found += [f"{node.name}: MIG instance {mig} on {gpu}" for gpu, mig in node.mig_instances()]
        found += [f"{node.name}: pod record {p.name}" for p in node.runtime_dir.glob("*.json")]
    return found


@contextlib.contextmanager
def scenario_namespace(
    testbed: SimCluster,
    *,
    prefix: str,
    timeout_s: float = 60.0,
    left: Callable[[], list[str]] | None = None,
    clean_s: float = 15.0,
) -> Iterator[str]:
    """A fresh namespace for one scenario; afterwards it is emptied (waiting `timeout_s` for its pods and
    claims) and deleted, and the nodes must hold nothing of it within `clean_s` (unprepare runs before the
    node finalizes a pod, so nothing may remain once the pods are gone): AssertionError naming what `left`
    (the simulated nodes' leftovers unless given) still finds."""
    remains = left if left is not None else (lambda: leftovers(testbed))
    name = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = k8s.CoreV1Api(testbed.api)
    core.create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": name}}))
    wait_for_service_account(testbed.api, name)
    try:
        yield name
    finally:
        delete_namespace_contents(testbed.api, name, timeout_s=timeout_s)
        core.delete_namespace(name)
        try:
            wait_for("the nodes to be clean", lambda: not remains(), timeout_s=clean_s)
        except WaitTimeoutError:
            raise AssertionError(f"scenario left behind: {remains()}") from None
