"""The fragmentation-aware extender (scheduler_extender) as the chart runs it, called by a real
kube-scheduler (issue #32): two replicas started with the arguments the chart renders, as the chart's
ServiceAccount with only the chart's ClusterRole (list and watch on four kinds), answer a prioritize call
alike; kube-scheduler steers a share by the one it calls onto the GPU another share half fills, where its own
scores would spread it to an empty node; with that replica stopped, pods still schedule (`ignorable: true`).

Its own control plane (the trace bench's `trace_cluster`, the recommended configuration with the shipped
extender stanza pointed at replica A), three simulated nodes: a and b with two T4s each, c with one. A whole
GPU is held on c and half of a's GPU 0 by a share (both pinned), so the mix of requests has whole GPUs in it:
a second half share on b would leave an untouched GPU half used that a whole GPU could no longer take; on a it
fills the GPU up. The pinned share also asks for most of a's CPUs, so LeastAllocated, without the extender,
prefers b. (The trace bench's own extender start, `trace_cluster(extender=True)`, is run by
test_trace_bench.py's `EXTENDER=1` smoke.)
"""

from __future__ import annotations

import json
import subprocess
import time
import urllib.error
import urllib.request
from pathlib import Path
from typing import Any

import pytest
import yaml
from kubernetes import client as k8s

from e2e.benches.trace.cluster import LABEL, TraceCluster, trace_cluster
from e2e.benches.trace.extender import extender_stats, with_extender_at
from e2e.benches.trace.gpu_models import model
from e2e.benches.trace.kube_objects import claim_object, pod_object
from e2e.benches.trace.records import TracePod, parse_nodes
from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.flags import load_scheduler_configuration
from e2e.controlplane.processes import is_alive, log_tail, stop_record
from e2e.controlplane.pytest_fixture import wait_for_service_account
from e2e.controlplane.releases import default_version
from e2e.controlplane.state import ComponentRecord
from e2e.harness.kube import Json
from e2e.harness.node import spawn_python
from e2e.harness.server_apply import ServerApply
from e2e.harness.webhook import helm_binary
from tests.support.loopback import free_port, http_status

pytestmark = pytest.mark.e2e
REPO = Path(__file__).resolve().parents[3]
RELEASE_NAMESPACE = "tessera-system"
NAME = "tessera-scheduler-extender"
NODES = """sn,cpu_milli,memory_mib,gpu,model
ext-a,16000,65536,2,T4
ext-b,16000,65536,2,T4
ext-c,16000,65536,1,T4
"""
NODE_NAMES = ["ext-a", "ext-b", "ext-c"]
NAMESPACE = "extender"
HOSTNAME = "kubernetes.io/hostname"


def run_pod(
    cluster: TraceCluster, name: str, pod: TracePod, *, node: str | None = None, make_pod: bool = True
) -> Json:
    """The pod's claim made, and the pod too unless `make_pod` is False; the pod's body either way."""
    claim = claim_object(pod, name=name, models=[model("T4")])
    k8s.ResourceV1Api(cluster.api).create_namespaced_resource_claim(
        NAMESPACE, k8s.ResourceV1ResourceClaim.model_validate(claim)
    )
    body = pod_object(
        pod, name=name, claim=name, node_selector={LABEL: "true", **({HOSTNAME: node} if node else {})}
    )
    body["metadata"]["namespace"] = NAMESPACE
    if make_pod:
        k8s.CoreV1Api(cluster.api).create_namespaced_pod(NAMESPACE, k8s.V1Pod.model_validate(body))
    return body


def node_of(cluster: TraceCluster, name: str, *, timeout_s: float = 60.0) -> str:
    """The node the pod is bound to, once it is."""
    core = k8s.CoreV1Api(cluster.api)
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        found: Any = core.read_namespaced_pod(name, NAMESPACE)
        if found.spec.node_name:
            return str(found.spec.node_name)
        time.sleep(0.5)
    raise AssertionError(f"pod {name} was not bound within {timeout_s}s")


def chart_objects() -> list[Json]:
    """What `--set schedulerExtender.enabled=true` renders for it."""
    helm = helm_binary()
    assert helm is not None, "no helm: run deploy/helm/build-helm.sh"
    done = subprocess.run(
        [helm, "template", "tessera", str(REPO / "deploy" / "helm" / "tessera"), "--namespace",
         RELEASE_NAMESPACE, "--set", "schedulerExtender.enabled=true", "--show-only",
         "templates/scheduler-extender.yaml", "--kube-version", default_version().removeprefix("v")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    return [d for d in yaml.safe_load_all(done.stdout) if d]


def service_account_kubeconfig(cluster: TraceCluster, path: Path) -> Path:
    """The admin kubeconfig's cluster with a token of the chart's ServiceAccount for the extender."""
    request = k8s.AuthenticationV1TokenRequest.model_validate({"spec": {"expirationSeconds": 3600}})
    answer: Any = k8s.CoreV1Api(cluster.api).create_namespaced_service_account_token(
        NAME, RELEASE_NAMESPACE, body=request
    )
    config = yaml.safe_load(cluster.plane.kubeconfig.read_text(encoding="utf-8"))
    cluster_entry = config["clusters"][0]
    config["clusters"] = [cluster_entry]
    config["users"] = [{"name": NAME, "user": {"token": answer.status.token}}]
    config["contexts"] = [{"name": NAME, "context": {"cluster": cluster_entry["name"], "user": NAME}}]
    config["current-context"] = NAME
    path.write_text(yaml.safe_dump(config), encoding="utf-8")
    return path


def start_replica(args: list[str], port: int, kubeconfig: Path, log: Path) -> ComponentRecord:
    """`python -m scheduler_extender` with the chart's arguments on 127.0.0.1:`port`, once Ready."""
    record = spawn_python(
        name=f"extender-{port}",
        args=[
            "-m",
            "scheduler_extender",
            *args,
            f"--port={port}",
            "--address=127.0.0.1",
            f"--kubeconfig={kubeconfig}",
        ],
        log_path=log,
        die_with_parent=True,
    )
    deadline = time.monotonic() + 90
    while http_status(port, "/readyz") != 200:
        assert is_alive(record.pid), log_tail(log)
        assert time.monotonic() < deadline, f"not ready (its watches listed) in 90 s:\n{log_tail(log)}"
        time.sleep(0.5)
    return record


def prioritize(port: int, body: Json) -> list[Json]:
    request = urllib.request.Request(
        f"http://127.0.0.1:{port}/prioritize", data=json.dumps(body).encode(), method="POST"
    )
    request.add_header("Content-Type", "application/json")
    with urllib.request.urlopen(request, timeout=10) as answer:
        scores: list[Json] = json.loads(answer.read())
    return scores


@pytest.mark.timeout(480)
def test_two_replicas_as_charted_answer_alike_and_scheduling_goes_on_without_them(tmp_path: Path) -> None:
    objects = chart_objects()
    [deployment] = [o for o in objects if o["kind"] == "Deployment"]
    assert deployment["spec"]["replicas"] == 2
    args = [
        a
        for a in deployment["spec"]["template"]["spec"]["containers"][0]["args"]
        if not a.startswith("--port=")
    ]
    identity = [o for o in objects if o["kind"] in ("ServiceAccount", "ClusterRole", "ClusterRoleBinding")]

    recommended = load_scheduler_configuration(REPO / "deploy" / "scheduler" / "kube-scheduler-config.yaml")
    port_a, port_b = free_port(), free_port()
    with trace_cluster(
        root=tmp_path / "cluster",
        binaries=ensure_built(allow_build=False),
        nodes=parse_nodes(NODES, what="the test's nodes"),
        scheduler_configuration=with_extender_at(recommended, port_a),  # kube-scheduler calls replica A
    ) as cluster:
        ServerApply(cluster.api).apply(identity)
        kubeconfig = service_account_kubeconfig(cluster, tmp_path / "extender.kubeconfig")
        replicas = [
            start_replica(args, port, kubeconfig, tmp_path / f"extender-{port}.log")
            for port in (port_a, port_b)
        ]
        logs = [tmp_path / f"extender-{port}.log" for port in (port_a, port_b)]
        ready_at = [log.stat().st_size for log in logs]  # RBAC may take a moment to reach the authorizer
        try:
            core = k8s.CoreV1Api(cluster.api)
            core.create_namespace(k8s.V1Namespace(metadata=k8s.V1ObjectMeta(name=NAMESPACE)))
            wait_for_service_account(cluster.api, NAMESPACE)
            half = TracePod(name="half", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=500)
            whole = TracePod(name="whole", cpu_milli=1000, memory_mib=1024, num_gpu=1, gpu_milli=1000)
            busy = TracePod(name="busy", cpu_milli=12000, memory_mib=1024, num_gpu=1, gpu_milli=500)
            run_pod(cluster, "whole", whole, node="ext-c")
            run_pod(cluster, "first-half", busy, node="ext-a")
            assert node_of(cluster, "whole") == "ext-c" and node_of(cluster, "first-half") == "ext-a"

            # the same call to both replicas: the same scores, once each has watched both allocations
            probe = {"Pod": run_pod(cluster, "probe", half, make_pod=False), "NodeNames": NODE_NAMES}
            deadline = time.monotonic() + 30
            while True:
                answers = [prioritize(port, probe) for port in (port_a, port_b)]
                scores = {s["Host"]: s["Score"] for s in answers[0]}
                if answers[0] == answers[1] and scores["ext-a"] > scores["ext-b"]:
                    break
                assert time.monotonic() < deadline, f"the replicas answer {answers}"
                time.sleep(1)

            run_pod(cluster, "second-half", half)
            assert node_of(cluster, "second-half") == "ext-a"  # on b, a whole GPU would be broken
            # kube-scheduler asked replica A, both verbs (the shipped configuration's two stanzas)
            stats = extender_stats(port_a)
            assert stats.get("prioritized", 0) >= 1 and stats.get("filled", 0) >= 1, stats
            # the chart's ClusterRole is all it needs: not one list or watch refused since it was Ready
            for log, offset in zip(logs, ready_at, strict=True):
                failed = [
                    line for line in log.read_bytes()[offset:].decode().splitlines() if "watch failed" in line
                ]
                assert not failed, failed[:2]

            stop_record(replicas[0], grace_s=5.0)  # A down: kube-scheduler's calls fail, ignorable
            run_pod(cluster, "third-half", half)
            assert node_of(cluster, "third-half") in {"ext-a", "ext-b"}  # scheduled on without it
            assert http_status(port_b, "/healthz") == 200  # B, which nothing routes to here, runs on
        finally:
            for record in replicas:
                stop_record(record, grace_s=5.0)
