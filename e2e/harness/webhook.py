"""`tessera webhook` on this machine for a control plane: the chart's MutatingWebhookConfiguration, pointed
at https://127.0.0.1:<port>/mutate, and the webhook process keeping its own certificate (e2e, bench)."""

from __future__ import annotations

import base64
import http.client
import json
import os
import shutil
import socket
import ssl
import subprocess
import sys
import threading
import uuid
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client as k8s

from e2e.controlplane.releases import default_version
from e2e.harness.kube import Json, Kubectl, wait_for
from e2e.harness.server_apply import ServerApply

ROOT = Path(__file__).resolve().parents[2]
CACHE = Path(os.environ.get("TESSERA_CACHE", Path.home() / ".cache" / "tessera"))
CONFIG = "tessera-admission"


def helm_binary() -> str | None:
    return shutil.which("helm") or next((str(p) for p in [CACHE / "helm" / "helm"] if p.exists()), None)


def chart_configuration(namespace: str, port: int) -> Json:
    """The chart's MutatingWebhookConfiguration (admissionWebhook.enabled=true), calling 127.0.0.1:`port`."""
    helm = helm_binary()
    assert helm is not None, "no helm: run deploy/helm/build-helm.sh"
    done = subprocess.run(
        [helm, "template", "t", str(ROOT / "deploy/helm/tessera"), "--namespace", namespace,
         "--set", "admissionWebhook.enabled=true", "--show-only", "templates/admission-webhook.yaml",
         "--kube-version", default_version().removeprefix("v")],
        capture_output=True, text=True, timeout=120, check=True,
    )  # fmt: skip
    (config,) = [
        d for d in yaml.safe_load_all(done.stdout) if d and d["kind"] == "MutatingWebhookConfiguration"
    ]
    for hook in config["webhooks"]:  # pods, and claims written for NVIDIA's DRA driver
        hook["clientConfig"] = {"url": f"https://127.0.0.1:{port}/mutate"}
    return dict(config)


def ca_bundle(api: k8s.ApiClient) -> str:
    config = k8s.AdmissionregistrationV1Api(api).read_mutating_webhook_configuration(CONFIG)
    client_config = config.webhooks[0].client_config if config.webhooks else None
    return str(client_config.ca_bundle or "") if client_config else ""


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def _listening(port: int) -> bool:
    with socket.socket() as s:
        return s.connect_ex(("127.0.0.1", port)) == 0


@dataclass(slots=True)
class RunningWebhook:
    process: subprocess.Popen[Any]
    port: int
    namespace: str
    log: Path
    kubectl: Kubectl
    api: k8s.ApiClient

    def stop(self) -> None:
        self.kubectl.run("delete", "mutatingwebhookconfiguration", CONFIG, "--ignore-not-found")
        self.process.terminate()
        self.process.wait(timeout=15)
        k8s.CoreV1Api(self.api).delete_namespace(self.namespace)


def ready(port: int, ca_pem: bytes) -> bool:
    """Whether the webhook answers /readyz (its certificate loaded, its template watch listed)."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=5)
    try:
        conn.request("GET", "/readyz")
        return conn.getresponse().status == 200
    except OSError:
        return False
    finally:
        conn.close()


def start_webhook(
    api: k8s.ApiClient,
    kubectl: Kubectl,
    kubeconfig: Path,
    namespace: str,
    log: Path,
    *,
    args: Sequence[str] = (),
    source: Path = ROOT,
) -> RunningWebhook:
    """Creates `namespace`, the configuration, and starts the webhook (with `args` besides the usual; from the
    checkout `source`, for a before/after bench); returns once its caBundle is set and it is ready."""
    port = _free_port()
    k8s.CoreV1Api(api).create_namespace(k8s.V1Namespace.model_validate({"metadata": {"name": namespace}}))
    ServerApply(api).apply([chart_configuration(namespace, port)])
    command = [
        sys.executable, "-m", "kubelet_plugin.command", "webhook", f"--kubeconfig={kubeconfig}",
        f"--namespace={namespace}", "--address=127.0.0.1", f"--port={port}", "--dns-name=127.0.0.1",
        f"--secret={CONFIG}-tls", f"--webhook-configuration={CONFIG}", "--log-format=console", *args,
    ]  # fmt: skip
    with log.open("w") as out:
        process = subprocess.Popen(
            command,
            cwd=source,
            stdout=out,
            stderr=subprocess.STDOUT,
            env={**os.environ, "PYTHONPATH": str(source)},
        )
    running = RunningWebhook(process, port, namespace, log, kubectl, api)
    try:
        wait_for("the webhook's caBundle in its configuration", lambda: ca_bundle(api), timeout_s=60)
        wait_for("the webhook's port", lambda: _listening(port), timeout_s=30)
        ca = base64.b64decode(ca_bundle(api))
        wait_for("the webhook's readiness", lambda: ready(port, ca), timeout_s=30)
    except BaseException:
        running.stop()
        raise
    return running


def admission_review(pod: Json, namespace: str) -> Json:
    """An AdmissionReview of a Pod's CREATE as the API server sends it, or as anyone may forge it."""
    return {
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


def post_reviews(port: int, ca_pem: bytes, reviews: Sequence[Json], *, connections: int = 4) -> list[Json]:
    """POST each review to https://127.0.0.1:`port`/mutate over `connections` kept-alive connections, as a
    client that reached the webhook's port would; the answers, in order."""
    context = ssl.create_default_context(cadata=ca_pem.decode())
    answers: list[Json] = [{} for _ in reviews]

    def worker(first: int) -> None:
        conn = http.client.HTTPSConnection("127.0.0.1", port, context=context, timeout=30)
        try:
            for i in range(first, len(reviews), connections):
                conn.request("POST", "/mutate", body=json.dumps(reviews[i]).encode())
                answers[i] = json.loads(conn.getresponse().read())
        finally:
            conn.close()

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(connections)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return answers
