"""`make bench-webhook`: the admission webhook's latency at 50 pods/s, and its memory.

Starts a control plane and `tessera webhook` as the e2e scenarios do (its own certificate, the chart's
configuration), then
- direct: AdmissionReviews of HAMi's and Volcano's examples posted to the webhook over HTTPS at a fixed rate
  on kept-alive connections, as the API server sends them; latency from send to answer;
- through the API server: Pods created at the same rate, with a GPU request (the API server calls the
  webhook) and without one (matchConditions keep the webhook out): the create call's latency, both;
and the webhook process's resident memory (now and peak). p50/p99 in milliseconds; target p99 <= 10 ms.

`--smoke` (`make bench-webhook SMOKE=1`, which `make test` runs): every part for one second at 20 pods/s; its
figures mean nothing and the target is not judged.
"""

from __future__ import annotations

import argparse
import base64
import copy
import http.client
import json
import ssl
import statistics
import tempfile
import threading
import time
import uuid
from collections.abc import Callable
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from e2e.controlplane.binaries import ensure_built
from e2e.controlplane.launcher import start_control_plane
from e2e.kube import Kubectl
from e2e.webhook import ROOT, ca_bundle, start_webhook

EXAMPLES = ROOT / "admission" / "examples"
TARGET_P99_MS = 10.0


def _pods() -> list[dict[str, Any]]:
    return [
        yaml.safe_load((EXAMPLES / f).read_text())
        for f in (
            "hami-default-use.yaml",
            "hami-memory-fraction.yaml",
            "hami-dynamic-mig.yaml",
            "volcano-vgpu.yaml",
        )
    ]


def _review(pod: dict[str, Any], namespace: str) -> bytes:
    return json.dumps(
        {
            "apiVersion": "admission.k8s.io/v1",
            "kind": "AdmissionReview",
            "request": {
                "uid": str(uuid.uuid4()),
                "kind": {"group": "", "version": "v1", "kind": "Pod"},
                "resource": {"group": "", "version": "v1", "resource": "pods"},
                "operation": "CREATE",
                "namespace": namespace,
                "object": pod,
            },
        }
    ).encode()


def paced(rate: float, count: int, call: Callable[[int], None], workers: int = 8) -> list[float]:
    """Calls `call(i)` at `rate` per second (open loop), `count` times; each call's latency in ms."""
    latencies: list[float] = []
    lock = threading.Lock()

    def one(i: int, due: float) -> None:
        time.sleep(max(0.0, due - time.perf_counter()))
        started = time.perf_counter()
        call(i)
        with lock:
            latencies.append((time.perf_counter() - started) * 1000)

    start = time.perf_counter() + 0.2
    with ThreadPoolExecutor(max_workers=workers) as pool:
        for f in [pool.submit(one, i, start + i / rate) for i in range(count)]:
            f.result()
    return latencies


def summary(name: str, ms: list[float]) -> str:
    q = statistics.quantiles(ms, n=100, method="inclusive")
    return f"{name:<44} n={len(ms):<5} p50={q[49]:6.2f} ms  p99={q[98]:6.2f} ms  max={max(ms):6.2f} ms"


def direct(port: int, ca_pem: bytes, rate: float, count: int, namespace: str) -> list[float]:
    context = ssl.create_default_context(cadata=ca_pem.decode())
    local = threading.local()
    pods = _pods()

    def call(i: int) -> None:
        conn = getattr(local, "conn", None)
        if conn is None:
            conn = local.conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=10)
        body = _review(pods[i % len(pods)], namespace)
        conn.request("POST", "/mutate", body=body, headers={"Content-Type": "application/json"})
        answer = json.loads(conn.getresponse().read())
        assert answer["response"]["allowed"], answer

    paced(rate, 20, call, workers=2)  # warm-up: connections, templates made once
    return paced(rate, count, call, workers=2)  # two kept-alive connections


def through_api(api: k8s.ApiClient, namespace: str, rate: float, count: int, gpu: bool) -> list[float]:
    core = k8s.CoreV1Api(api)
    base = copy.deepcopy(_pods()[0])
    resources = base["spec"]["containers"][0]["resources"]
    resources["limits"] = {k: str(v) for k, v in resources["limits"].items()} if gpu else {"cpu": "100m"}
    tag = f"{'gpu' if gpu else 'plain'}-{uuid.uuid4().hex[:6]}"
    pods = []  # built before the clock runs: only the create call is timed
    for i in range(count):
        pod = copy.deepcopy(base)
        pod["metadata"] = {"name": f"{tag}-{i}"}
        pods.append(k8s.V1Pod.model_validate(pod))

    def call(i: int) -> None:
        core.create_namespaced_pod(namespace, pods[i], _preload_content=False)

    return paced(rate, count, call)


def served_ms(log: Path, since: int) -> list[float]:
    """The webhook's own time per converted pod (body read to answer), from its log lines after `since`."""
    lines = log.read_text().splitlines()[since:]
    return [
        float(m.split("=", 1)[1])
        for line in lines
        if "pod converted" in line
        for m in line.split()
        if m.startswith("ms=")
    ]


def memory_kib(pid: int) -> dict[str, int]:
    fields = {}
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            fields[key] = int(value.split()[0])
    return fields


def main() -> int:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--rate", type=float, default=50.0, help="pods per second (default 50)")
    parser.add_argument("--seconds", type=float, default=20.0)
    parser.add_argument("--smoke", action="store_true", help="one second at 20 pods/s (make test runs it)")
    args = parser.parse_args()
    if args.smoke:
        args.rate, args.seconds = 20.0, 1.0
    count = int(args.rate * args.seconds)
    binaries = ensure_built(allow_build=True)
    with tempfile.TemporaryDirectory(prefix="tessera-bench-webhook-") as tmp:
        root = Path(tmp)
        plane = start_control_plane(state_dir=root / "controlplane", binaries=binaries)
        api = plane.api_client()
        kubectl = Kubectl(binaries.kubectl, plane.kubeconfig)
        webhook = start_webhook(api, kubectl, plane.kubeconfig, "tessera-admission", root / "webhook.log")
        try:
            k8s.CoreV1Api(api).create_namespace(
                k8s.V1Namespace.model_validate({"metadata": {"name": "bench"}})
            )
            ca = base64.b64decode(ca_bundle(api))
            paced(args.rate, 20, lambda i: None)
            mark = len(webhook.log.read_text().splitlines())
            direct_ms = direct(webhook.port, ca, args.rate, count, "bench")
            lines = [
                f"webhook: {args.rate:g} pods/s for {args.seconds:g} s, on {plane.server}",
                summary("direct AdmissionReview over HTTPS (client)", direct_ms),
                summary("  of which in the webhook (its log)", served_ms(webhook.log, mark)[-count:]),
            ]
            through_api(api, "bench", args.rate, 20, gpu=True)  # warm-up
            lines.append(summary("pod create via API server, no GPU (baseline)", through_api(
                api, "bench", args.rate, count, gpu=False)))  # fmt: skip
            lines.append(summary("pod create via API server, HAMi GPU request", through_api(
                api, "bench", args.rate, count, gpu=True)))  # fmt: skip
            mem = memory_kib(webhook.process.pid)
            lines.append(
                f"webhook memory: RSS {mem['VmRSS'] / 1024:.1f} MiB, peak {mem['VmHWM'] / 1024:.1f} MiB"
            )
        finally:
            webhook.stop()
            plane.stop()
    print("\n".join(lines))
    if args.smoke:
        print("--smoke: every part once, on a tiny scale; the figures mean nothing, no target is judged")
        return 0
    direct_p99 = statistics.quantiles(direct_ms, n=100, method="inclusive")[98]
    print(
        f"target p99 <= {TARGET_P99_MS:g} ms (direct): {'met' if direct_p99 <= TARGET_P99_MS else 'MISSED'}"
    )
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
